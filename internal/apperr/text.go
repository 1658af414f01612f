package apperr

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// CleanText says whether s is valid UTF-8 without control characters: what
// a name or label field accepts (Postgres refuses NUL, and a control
// character in a name breaks the pages and logs that show it).
func CleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// Token is CleanText without spaces: ids such as Stripe's.
func Token(s string) bool {
	return CleanText(s) && !strings.ContainsFunc(s, unicode.IsSpace)
}
