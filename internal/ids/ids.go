// Package ids checks identifiers before they reach Postgres, so that a
// malformed id in a URL or a form is a 404 (or a field error) and never a
// query that fails on a cast.
package ids

// IsUUID accepts the canonical 8-4-4-4-12 hex form (either case).
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
