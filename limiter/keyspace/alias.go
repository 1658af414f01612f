package keyspace

// Alias is the key that maps a tenant's external id (the backend's own id
// for it) to the tenant id, a string: "<p>:{x:<external id>}:tid". It has
// a hash tag of its own, since it is read before the tenant is known; the
// limiter resolves it once and caches it, and drops what it cached for a
// tenant when the tenant's Invalidation arrives. Tollgate's server writes
// it (with the snapshot's TTL) and announces the tenant whenever the
// external id changes. External ids never hold '{' or '}'.
func (k Keys) Alias(externalID string) string { return k.Base() + ":{x:" + externalID + "}:tid" }
