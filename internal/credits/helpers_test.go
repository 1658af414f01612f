package credits_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// clock is a settable test clock, safe across goroutines.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is a test's services on the package's database.
type bundle struct {
	db     *pgxpool.Pool
	rdb    *redis.Client
	prefix string
	ents   *entitlements.Service
	cat    *catalogue.Service
	svc    *credits.Service
	clock  *clock
}

func setup(t *testing.T) bundle {
	t.Helper()
	db := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	ents := entitlements.NewService(db, limitstore.New(rdb, prefix), nil, entitlements.Options{})
	cat := catalogue.NewService(db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	c := &clock{now: time.Now().UTC().Truncate(time.Microsecond)}
	return bundle{db: db, rdb: rdb, prefix: prefix, ents: ents, cat: cat, clock: c, svc: credits.NewService(db, ents, cat, nil, credits.Options{Now: c.Now})}
}

func unique(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// tenant makes a plan with quotas of requests and exports and a tenant on it.
func (b bundle) tenant(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	key := unique("plan")
	limit := int64(1000)
	_, err := b.cat.CreatePlan(ctx, catalogue.PlanInput{Key: key, Name: key, Quotas: map[string]*catalogue.QuotaInput{
		"requests": {Limit: &limit, Mode: "hard"}, "exports": {Limit: &limit, Mode: "soft"}}})
	if err != nil {
		t.Fatal(err)
	}
	tn, err := b.ents.CreateTenant(ctx, entitlements.TenantInput{Name: unique("tenant"), Plan: key})
	if err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

func (b bundle) grant(t *testing.T, tenant string, amount int64, prio int, expires *time.Time) credits.Grant {
	t.Helper()
	g, err := b.svc.Create(context.Background(), tenant, credits.GrantInput{Meter: "requests", Amount: &amount, Priority: &prio, ExpiresAt: expires})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Millisecond) // creation order is visible in created_at
	return g
}

func ptr[T any](v T) *T { return &v }
