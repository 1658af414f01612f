package credentials_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	rdb    *redis.Client
	prefix string
	ents   *entitlements.Service // the tenants the keys belong to
	svc    *credentials.Service
	free   string // this test's plan key
}

// setup gives a test its own plan, Redis prefix and a Service whose
// revocation subscription runs until the test ends.
func setup(t testing.TB) *bundle {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context()) // t.Context ends before any Cleanup runs
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	b := &bundle{ctx: ctx, pool: pool, rdb: rdb, prefix: prefix, free: testkit.Unique("free")}
	b.ents = entitlements.NewService(pool, limitstore.New(rdb, prefix), nil, entitlements.Options{DefaultPlan: b.free})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: b.ents.TouchCatalogue})
	b.svc = b.newService(t)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	limit := int64(100)
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: b.free, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &limit}}}); err != nil {
		t.Fatalf("create plan %s: %v", b.free, err)
	}
	return b
}

func (b *bundle) newService(t testing.TB) *credentials.Service {
	return credentials.New(b.pool, b.ents, testkit.Logger(t), credentials.Options{Redis: b.rdb, Prefix: b.prefix})
}

func (b *bundle) mustTenant(t testing.TB, plan string) entitlements.Tenant {
	t.Helper()
	tn, err := b.ents.CreateTenant(b.ctx, entitlements.TenantInput{Name: testkit.Unique("Tenant"), Plan: plan})
	if err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	return tn
}
