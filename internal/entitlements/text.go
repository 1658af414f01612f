package entitlements

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxNameLen bounds a tenant's name, as the catalogue bounds a plan's.
const maxNameLen = 200

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func uniqueSorted(in []string) []string {
	out := make([]string, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// cleanText is valid UTF-8 without control characters (Postgres refuses NUL).
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// token is cleanText without spaces: ids such as Stripe's.
func token(s string) bool {
	return cleanText(s) && !strings.ContainsFunc(s, unicode.IsSpace)
}
