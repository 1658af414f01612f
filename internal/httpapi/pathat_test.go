package httpapi

import (
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// A type mismatch names the field as the API does, map keys and array
// indices included, wherever it sits in the body.
func TestTypeMismatchNamesTheWholePath(t *testing.T) {
	type quota struct {
		Limit *int64   `json:"limit"`
		Tags  []string `json:"tags"`
	}
	type body struct {
		Name   string            `json:"name"`
		Quotas map[string]*quota `json:"quotas"`
		List   []map[string]int  `json:"list"`
		Nested struct {
			Deep map[string]map[string]bool `json:"deep"`
		} `json:"nested"`
	}
	for _, c := range []struct{ raw, field string }{
		{`{"name": 5}`, "name"},
		{`{"name": {"a": 1}}`, "name"},
		{`{"name": ["x"]}`, "name"},
		{`{"quotas": {"a": {"limit": 1}, "tokens": {"limit": "ten"}}}`, "quotas.tokens.limit"},
		{`{"quotas": {"tokens": {"limit": 1, "tags": ["ok", 7]}}}`, "quotas.tokens.tags[1]"},
		{`{"quotas": {"tokens": 3}}`, "quotas.tokens"},
		{`{"list": [{"a": 1}, {"b": 2, "c": "x"}]}`, "list[1].c"},
		{`{"nested": {"deep": {"k1": {"x": true}, "k2": {"y": "no"}}}}`, "nested.deep.k2.y"},
		{`{"quotas": {"a.b": {"limit": false}}}`, "quotas.a.b.limit"},
		{`[1, 2]`, "body"},
	} {
		var b body
		err := decodeJSONBytes([]byte(c.raw), &b)
		e, ok := apperr.As(err)
		if !ok || len(e.Fields) != 1 || e.Fields[0].Field != c.field {
			t.Errorf("%s: %v, want the field %q", c.raw, err, c.field)
		}
	}
	if err := decodeJSONBytes([]byte(`{"quotas": {"t": {"limit": 1}}}`), &body{}); err != nil {
		t.Fatalf("a good body: %v", err)
	}
}
