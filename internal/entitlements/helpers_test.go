package entitlements_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	rdb    *redis.Client
	prefix string
	store  *limitstore.Store
	svc    *entitlements.Service
	cat    *catalogue.Service // wired to svc, as cmd wires them
	free   string             // this test's default plan key
}

func uniq(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// setup gives a test its own default plan, Redis prefix and a Service.
func setup(t testing.TB) *bundle {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	b := &bundle{ctx: ctx, pool: pool, rdb: rdb, prefix: prefix, store: limitstore.New(rdb, prefix), free: uniq("free")}
	b.svc = b.newService(t)
	b.cat = catalogue.NewService(pool, slog.New(slog.NewTextHandler(tlog{t}, nil)), catalogue.Options{Touch: b.svc.TouchCatalogue})
	b.mustPlan(t, catalogue.PlanInput{Key: b.free, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100)}}})
	return b
}

func (b *bundle) newService(t testing.TB) *entitlements.Service {
	return entitlements.NewService(b.pool, b.store, slog.New(slog.NewTextHandler(tlog{t}, nil)), entitlements.Options{
		DefaultPlan: b.free, GracePeriod: time.Hour})
}

func ptr[T any](v T) *T { return &v }

func (b *bundle) mustPlan(t testing.TB, in catalogue.PlanInput) catalogue.Plan {
	t.Helper()
	p, err := b.cat.CreatePlan(b.ctx, in)
	if err != nil {
		t.Fatalf("create plan %s: %v", in.Key, err)
	}
	return p
}

func (b *bundle) mustTenant(t testing.TB, plan string) entitlements.Tenant {
	t.Helper()
	tn, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: uniq("Tenant"), Plan: plan})
	if err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	return tn
}

// tlog sends the service's log lines to the test's output.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// fieldsOf names the fields of a validation error.
func fieldsOf(err error) []string {
	e, ok := apperr.As(err)
	if !ok {
		return nil
	}
	var out []string
	for _, f := range e.Fields {
		out = append(out, f.Field)
	}
	return out
}
