package billing

import (
	"encoding/json"
	"testing"
)

func TestJSONBSafe(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a":"x"}`:              `{"a":"x"}`,
		`{"a":"x\u0000y"}`:       `{"a":"x\ufffdy"}`,
		`{"a":"\u0000\u0000"}`:   `{"a":"\ufffd\ufffd"}`,
		`{"a":"x\\u0000y"}`:      `{"a":"x\\u0000y"}`,      // an escaped backslash, then text
		`{"a":"x\\\u0000y"}`:     `{"a":"x\\\ufffdy"}`,     // an escaped backslash, then a NUL
		`{"\u0000k":"v\u00001"}`: `{"\ufffdk":"v\ufffd1"}`, // keys too
	} {
		got := string(jsonbSafe([]byte(in)))
		if got != want {
			t.Errorf("jsonbSafe(%s) = %s, want %s", in, got, want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("jsonbSafe(%s) = %s is not valid JSON", in, got)
		}
	}
}
