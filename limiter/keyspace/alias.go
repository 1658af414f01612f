package keyspace

// Alias is the key that maps a tenant's external id (the backend's own id
// for it) to the tenant id, a string: "<p>:{x:<external id>}:tid". It has
// a hash tag of its own, since it is read before the tenant is known; the
// limiter resolves it once and caches it, and drops what it cached for a
// tenant when the tenant's Invalidation arrives. Tollgate's server writes
// it (with the snapshot's TTL) and announces the tenant whenever the
// external id changes. External ids never hold '{' or '}'.
func (k Keys) Alias(externalID string) string { return k.Base() + ":{x:" + externalID + "}:tid" }

// MaxExternalIDLen is the longest external id Tollgate accepts.
const MaxExternalIDLen = 128

// ValidExternalID is the rule for external ids, the one place it is
// written (the server's admin API, the limiter and its remote loader all
// check it; migration 00065 checks the same pattern): 1-128 of
// [A-Za-z0-9._:@-], what is safe unescaped in a URL path segment, a Redis
// key and a hash tag. Case-sensitive.
func ValidExternalID(s string) bool {
	if s == "" || len(s) > MaxExternalIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}
