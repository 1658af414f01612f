package numfmt

import (
	"math"
	"testing"
)

func TestInt(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234", -999: "-999",
		math.MaxInt64: "9,223,372,036,854,775,807", math.MinInt64: "-9,223,372,036,854,775,808"} {
		if got := Int(n); got != want {
			t.Errorf("Int(%d) = %q, want %q", n, got, want)
		}
	}
}
