package postgres_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/migrations"
)

// freshDB names a database that does not exist yet and drops it afterwards.
func freshDB(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		testkit.Unavailable(t, "postgres", err)
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := "tollgate_migrate_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(context.Background())
	})
	base := pgtest.BaseURL()
	i := strings.LastIndexByte(strings.SplitN(base, "?", 2)[0], '/')
	return base[:i+1] + name + "?sslmode=disable"
}

func gooseVersion(t *testing.T, url string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int64
	if err := conn.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version WHERE is_applied`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMigrateCreatesMissingDatabaseAndIsIdempotent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := freshDB(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))

	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		t.Fatalf("EnsureDatabase on a missing database: %v", err)
	}
	if err := postgres.Migrate(ctx, url, log); err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	// Each River migration is logged once at INFO (ours), not also by
	// rivermigrate.
	if n, m := strings.Count(logs.String(), `"msg":"river migration applied","version":2,`), strings.Count(logs.String(), "rivermigrate"); n != 1 || m != 0 {
		t.Fatalf("River's version 2 logged %d times by us and %d lines by rivermigrate at INFO:\n%s", n, m, logs.String())
	}
	v1 := gooseVersion(t, url)
	if v1 < 2 {
		t.Fatalf("goose version after migrate = %d, want >= 2 (our schema and River's)", v1)
	}
	// Twice: a no-op that still succeeds.
	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url, log); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if v2 := gooseVersion(t, url); v2 != v1 {
		t.Fatalf("second migrate moved the version from %d to %d", v1, v2)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, table := range []string{"tenants", "plans", "api_keys", "stripe_events", "usage_events", "river_job",
		// the periodic and retention jobs' indexes
		"usage_flushes_flushed_idx", "stripe_meter_reports_period_idx", "stripe_meter_reports_todo_idx",
		"quota_overrides_expires_idx", "usage_events_received_idx", "entitlement_versions_created_idx"} {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil || !ok {
			t.Errorf("relation %s missing after migrate (err %v)", table, err)
		}
	}
}

func TestMigrateThreeAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := freshDB(t)
	log := slog.New(slog.DiscardHandler)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := postgres.EnsureDatabase(ctx, url); err != nil {
				errs[i] = err
				return
			}
			errs[i] = postgres.Migrate(ctx, url, log)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	if v := gooseVersion(t, url); v < 2 {
		t.Fatalf("version %d after concurrent migrate", v)
	}
}

func TestEnsureDatabaseRejectsURLWithoutName(t *testing.T) {
	err := postgres.EnsureDatabase(context.Background(), "postgres://postgres@127.0.0.1:5432/?sslmode=disable")
	if err == nil || !strings.Contains(err.Error(), "names no database") {
		t.Fatalf("err = %v, want 'names no database'", err)
	}
}

// A database whose River schema is older than this build's River (River was
// upgraded after the database was created) is brought up on the next start,
// although goose has nothing left to apply.
func TestMigrateBringsUpAnOlderRiverSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := freshDB(t)
	log := slog.New(slog.DiscardHandler)
	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url, log); err != nil {
		t.Fatal(err)
	}
	goose := gooseVersion(t, url)

	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m, err := rivermigrate.New(riverdatabasesql.New(db), &rivermigrate.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	all := m.AllVersions()
	latest := all[len(all)-1].Version
	const older = 5 // River v0.x's schema before its later migrations
	if _, err := m.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: older}); err != nil {
		t.Fatal(err)
	}
	riverVersion := func() int {
		t.Helper()
		got, err := m.ExistingVersions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got[len(got)-1].Version
	}
	if v := riverVersion(); v != older {
		t.Fatalf("set-up: River at version %d, want %d", v, older)
	}

	if err := postgres.Migrate(ctx, url, log); err != nil {
		t.Fatalf("migrate over an older River schema: %v", err)
	}
	if v := riverVersion(); v != latest {
		t.Fatalf("River at version %d after Migrate, want %d (this build's latest)", v, latest)
	}
	if v := gooseVersion(t, url); v != goose {
		t.Fatalf("goose version moved from %d to %d", goose, v)
	}
}

// Migration 14 attributes the hourly history written before it to periods:
// a period starting at 10:37 gets its part of the 10:00 row that its own
// usage events and flushes prove (the rest stays with the previous
// period), a row no source explains stays with the period the hour starts
// in, and a tenant's first period gets its first hour whole. Down sums the
// periods' rows of an hour again.
func TestMigrationAttributesHourlyUsageToPeriods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := freshDB(t)
	log := slog.New(slog.DiscardHandler)
	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url, log); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	noop := goose.NewGoMigration(2, &goose.GoFunc{Mode: goose.TransactionEnabled}, &goose.GoFunc{Mode: goose.TransactionEnabled})
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithGoMigrations(noop), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 13); err != nil {
		t.Fatalf("down to 13: %v", err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	h := time.Date(2026, 3, 10, 10, 0, 0, 0, time.UTC)
	cur := h.Add(37 * time.Minute)
	prev := cur.AddDate(0, -1, 0)
	const a, first = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
	exec(`INSERT INTO plans (key, name) VALUES ('p', 'p')`)
	exec(`INSERT INTO tenants (id, name, plan_key, period_anchor) VALUES ($1, 'a', 'p', $3), ($2, 'first', 'p', $3)`, a, first, cur)
	for _, m := range []string{"requests", "exports"} {
		exec(`INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES ($1, $2, $3, $4, 0), ($1, $2, $4, $5, 0)`,
			a, m, prev, cur, cur.AddDate(0, 1, 0))
	}
	exec(`INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES ($1, 'requests', $2, $3, 0)`, first, cur, cur.AddDate(0, 1, 0))
	exec(`INSERT INTO usage_hourly (tenant_id, meter, hour, used) VALUES
		($1, 'requests', $3, 40), ($1, 'requests', $4, 50), ($1, 'requests', $5, 15),
		($1, 'exports', $4, 25), ($2, 'requests', $4, 9)`, a, first, h.Add(-time.Hour), h, h.Add(time.Hour))
	// Of a's 50 requests at 10:00, 12 + 8 are on record as the new period's.
	exec(`INSERT INTO usage_events (tenant_id, idempotency_key, meter, quantity, occurred_at, period_start) VALUES
		($1, 'e1', 'requests', 12, $2, $3), ($1, 'e0', 'requests', 30, $4, $5)`, a, h.Add(40*time.Minute), cur, h.Add(10*time.Minute), prev)
	exec(`INSERT INTO usage_flushes (batch_id, tenant_id, meter, period_start, quantity, flushed_at) VALUES
		('b1', $1, 'requests', $2, 8, $3), ('b2', $1, 'requests', $2, 15, $4)`, a, cur, h.Add(50*time.Minute), h.Add(time.Hour+time.Minute))

	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	rows := func() string {
		t.Helper()
		r, err := db.QueryContext(ctx, `SELECT tenant_id, meter, period_start, hour, used FROM usage_hourly ORDER BY 1, 2, 4, 3`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			var tenant, meter string
			var start, hour time.Time
			var used int64
			if err := r.Scan(&tenant, &meter, &start, &hour, &used); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %s %s %s %d", tenant[len(tenant)-1:], meter,
				start.UTC().Format("01-02 15:04"), hour.UTC().Format("01-02 15:04"), used))
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "\n")
	}
	want := strings.Join([]string{
		"a exports 02-10 10:37 03-10 10:00 25", // no source: the period the hour starts in
		"a requests 02-10 10:37 03-10 09:00 40",
		"a requests 02-10 10:37 03-10 10:00 30", // 50 - the 20 proven
		"a requests 03-10 10:37 03-10 10:00 20",
		"a requests 03-10 10:37 03-10 11:00 15",
		"b requests 03-10 10:37 03-10 10:00 9", // the tenant's first period
	}, "\n")
	if got := rows(); got != want {
		t.Fatalf("after migration 14 (tenant meter period hour used):\n%s\nwant\n%s", got, want)
	}
	if _, err := p.DownTo(ctx, 13); err != nil {
		t.Fatalf("down again: %v", err)
	}
	var n, sum int64
	if err := db.QueryRowContext(ctx, `SELECT count(*), sum(used) FROM usage_hourly WHERE tenant_id = $1 AND meter = 'requests' AND hour = $2`, a, h).Scan(&n, &sum); err != nil || n != 1 || sum != 50 {
		t.Fatalf("after down: %d rows of %d at 10:00 (%v), want one of 50", n, sum, err)
	}
}
