package metering

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// stripe-mock, when a test started it, dies with the test binary
// (stripemock sets a parent-death signal), as pgtest.Main exits.
func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx    context.Context
	db     *pgxpool.Pool
	rdb    redis.UniversalClient
	prefix string
	store  *limitstore.Store
	svc    *Service
}

func testLog(t testing.TB) *slog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// setup gives a test the package's database, the shared Redis under a
// fresh prefix, and a service whose snapshots come from Redis.
func setup(t testing.TB) *bundle {
	t.Helper()
	db := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	return newBundle(t, db, rdb, prefix)
}

func newBundle(t testing.TB, db *pgxpool.Pool, rdb redis.UniversalClient, prefix string) *bundle {
	b := &bundle{ctx: context.Background(), db: db, rdb: rdb, prefix: prefix, store: limitstore.New(rdb, prefix)}
	b.svc = NewService(db, b.store, testLog(t), Options{Snapshot: func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
		s, ok, err := b.store.Snapshot(ctx, tenant)
		if err == nil && !ok {
			err = limiter.ErrUnknownTenant
		}
		return s, err
	}})
	return b
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newTenant inserts a plan of its own and a tenant on it, anchored at anchor.
func (b *bundle) newTenant(t testing.TB, anchor time.Time) string {
	t.Helper()
	plan := "p" + randHex(6)
	if _, err := b.db.Exec(b.ctx, `INSERT INTO plans (key, name) VALUES ($1, $1)`, plan); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := b.db.QueryRow(b.ctx, `INSERT INTO tenants (name, plan_key, period_anchor) VALUES ('t', $1, $2) RETURNING id`, plan, anchor).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// putSnapshot writes a snapshot with the tenant's current period and the
// given quotas, as the entitlements service would.
func (b *bundle) putSnapshot(t testing.TB, tenant string, version int64, quotas map[string]limiter.Quota) limiter.Snapshot {
	t.Helper()
	tp, err := loadTenantPeriods(b.ctx, b.db, tenant)
	if err != nil {
		t.Fatal(err)
	}
	p := tp.at(time.Now())
	snap := limiter.Snapshot{TenantID: tenant, Plan: "test", Status: "active", Version: version, Quotas: quotas,
		PeriodStart: p.Start, PeriodEnd: p.End, NextPeriodEnd: tp.at(p.End).End}
	if err := b.store.PutSnapshot(b.ctx, snap); err != nil {
		t.Fatal(err)
	}
	return snap
}

func (b *bundle) durable(t testing.TB, tenant, meter string, start time.Time) int64 {
	t.Helper()
	n, err := b.svc.LoadUsage(b.ctx, tenant, meter, start)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) count(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := b.db.QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
