package cursor

import (
	"testing"
	"time"
)

func TestRoundTripAndRefusals(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 4, 5, 123456000, time.UTC)
	gotAt, gotID, ok := Decode(Encode(at, "evt_1|odd"))
	if !ok || !gotAt.Equal(at) || gotID != "evt_1|odd" {
		t.Fatalf("round trip: %v %q %v", gotAt, gotID, ok)
	}
	for _, bad := range []string{"", "!!", Encode(at, "")[:4], "MTIz", "YWJjfGlk" /* abc|id */} {
		if _, _, ok := Decode(bad); ok {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}
