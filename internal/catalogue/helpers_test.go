package catalogue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	svc  *catalogue.Service
}

func uniq(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// setup gives a test a catalogue on the package's database; opts.Touch
// nil reaches no tenant (the tenants are entitlements', tested there).
func setup(t testing.TB, opts catalogue.Options) *bundle {
	t.Helper()
	pool := pgtest.New(t)
	return &bundle{ctx: t.Context(), pool: pool, svc: catalogue.NewService(pool, slog.New(slog.NewTextHandler(tlog{t}, nil)), opts)}
}

func ptr[T any](v T) *T { return &v }

func (b *bundle) mustPlan(t testing.TB, in catalogue.PlanInput) catalogue.Plan {
	t.Helper()
	p, err := b.svc.CreatePlan(b.ctx, in)
	if err != nil {
		t.Fatalf("create plan %s: %v", in.Key, err)
	}
	return p
}

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

// tlog sends the service's log lines to the test's output.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
