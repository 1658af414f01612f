package apperr

import "testing"

// Every code has a row with a client or upstream status, and a code the
// table does not know answers as Invalid, never as a 500.
func TestHTTPOfCoversEveryCode(t *testing.T) {
	want := map[Code]int{Invalid: 400, Unauthorized: 401, NotFound: 404, Conflict: 409, Unprocessable: 422, TooLarge: 413, Unavailable: 503, Upstream: 502}
	for code, status := range want {
		h := HTTPOf(code)
		if h.Status != status || h.Slug == "" || h.Title == "" || h.Heading == "" {
			t.Errorf("%s: %+v, want status %d and every text filled", code, h, status)
		}
	}
	if len(httpOf) != len(want) {
		t.Errorf("table has %d codes, this test knows %d: add the new code here", len(httpOf), len(want))
	}
	if h := HTTPOf("made_up"); h.Status != 400 {
		t.Errorf("unknown code answers %d, want 400", h.Status)
	}
}
