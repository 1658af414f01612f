// Package numfmt writes numbers for people: the console's pages and the
// explanations the API gives say 100,000, not 100000.
package numfmt

import (
	"strconv"
	"strings"
)

// Int writes n with thousands separators: 1,234,567.
func Int(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	if len(digits) < len(s) {
		b.WriteByte('-')
	}
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
