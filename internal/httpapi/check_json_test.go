package httpapi

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
)

// TestAppendCheckIsEncodingJSON: the hand-written answer of a check is
// byte for byte what encoding/json's Encoder (echo's c.JSON) writes, for
// plain names and for names that JSON must escape (quotes, HTML, control
// characters, non-ASCII, invalid UTF-8), omitted fields and none.
func TestAppendCheckIsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, out := range []checkResponse{
		{Allowed: true, Plan: "pro", Policies: []limithttp.ProblemPolicy{
			{Name: "rate", Limit: 200, Remaining: 199, Reset: 1, Window: 10},
			{Name: "requests", Limit: 100000, Remaining: 0, Reset: 2678388, Window: 2678400, Mode: limiter.ModeHard},
		}},
		{Allowed: true, Plan: "", Policies: []limithttp.ProblemPolicy{}},
		{Allowed: false, Plan: "x", Policies: nil},
		{Allowed: true, Plan: `a "quoted" \ <b>&amp;</b>`, Policies: []limithttp.ProblemPolicy{
			{Name: "concurrency", Limit: 3, Remaining: -1, Reset: 0, Unit: limithttp.UnitConcurrent},
			{Name: "tab\there\nnewline", Limit: -5, Remaining: 1 << 62, Reset: 9},
		}},
		{Allowed: true, Plan: "Énterprise ☃ \u2028 \xff\xfe", Policies: []limithttp.ProblemPolicy{{Name: "ü", Mode: limiter.ModeSoft}}},
	} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(out); err != nil {
			t.Fatal(err)
		}
		if got := appendCheck(nil, &out); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendCheck(%+v)\n got %s\nwant %s", out, got, want.Bytes())
		}
	}
}
