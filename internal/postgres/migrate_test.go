package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/internal/testkit"
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
	log := slog.New(slog.DiscardHandler)

	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		t.Fatalf("EnsureDatabase on a missing database: %v", err)
	}
	if err := postgres.Migrate(ctx, url, log); err != nil {
		t.Fatalf("first migrate: %v", err)
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
