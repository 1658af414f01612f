package limiter

import (
	"time"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// keyNames names the Redis keys of the limiter: the layout is the
// protocol in package keyspace, which Tollgate's server (internal/limitstore)
// names its keys with too. The short unexported names keep the decision
// paths readable.
type keyNames struct {
	ks keyspace.Keys
	// prefix is ks.Base(), the prefix in use.
	prefix string
}

func newKeyNames(prefix string) keyNames {
	ks := keyspace.Keys{Prefix: prefix}
	return keyNames{ks: ks, prefix: ks.Base()}
}

func (k keyNames) tenantBase(tenant string) string { return k.ks.TenantBase(tenant) }
func (k keyNames) snapshot(tenant string) string   { return k.ks.Snapshot(tenant) }
func (k keyNames) state(tenant string) string      { return k.ks.State(tenant) }
func (k keyNames) limits(tenant string) string     { return k.ks.Limits(tenant) }
func (k keyNames) concurrency(tenant string) string {
	return k.ks.Concurrency(tenant)
}
func (k keyNames) window(tenant, name string, window time.Duration) string {
	return k.ks.Window(tenant, name, window)
}
func (k keyNames) explicitRate(tenant string) string { return k.ks.ExplicitRate(tenant) }
func (k keyNames) explicitConcurrency(tenant string) string {
	return k.ks.ExplicitConcurrency(tenant)
}
func (k keyNames) reservation(tenant, id string) string { return k.ks.Reservation(tenant, id) }
func (k keyNames) leaseReturn(tenant, id string) string { return k.ks.PrefetchReturn(tenant, id) }
func (k keyNames) refusalBase(tenant string) string     { return k.ks.RefusalBase(tenant) }
func (k keyNames) invalidations() string                { return k.ks.Invalidations() }
func (k keyNames) instances() string                    { return k.ks.Instances() }
func (k keyNames) dirtyBase(tenant string) string       { return k.ks.DirtyBase(tenant) }

// counterSuffix is "<meter>:<period start unix>", the state hash field
// suffix of one period counter.
func counterSuffix(meter string, periodStart time.Time) string {
	return keyspace.CounterOf(meter, periodStart).Suffix
}
