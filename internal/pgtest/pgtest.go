// Package pgtest gives each test package its own Postgres database, cloned
// from a template that is migrated once per schema version, so that packages
// run in parallel against the real server without seeing each other's rows.
//
// Use it from TestMain so the database is dropped when the package finishes:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// then pgtest.New(t) in each test. Without a server, a test skips locally and
// fails when CI is set.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/migrations"
)

// BaseURL is the server the tests use: PGTEST_URL, else the local default.
func BaseURL() string {
	if u := os.Getenv("PGTEST_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

var (
	once    sync.Once
	dbURL   string
	dbName  string
	pool    *pgxpool.Pool
	initErr error
)

// Main runs the package's tests and drops the package's database afterwards.
func Main(m *testing.M) {
	code := m.Run()
	testkit.Cleanup()
	if pool != nil {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if conn, err := pgx.Connect(ctx, BaseURL()); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)")
			conn.Close(ctx)
		}
		cancel()
	}
	os.Exit(code)
}

// New returns the package's pool, creating the database on first use.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	once.Do(func() { initErr = setup() })
	if initErr != nil {
		testkit.Unavailable(t, "postgres", initErr)
	}
	return pool
}

// URL returns the connection URL of the package's database (for processes
// the test starts). New must have been called first.
func URL(t testing.TB) string {
	New(t)
	return dbURL
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer admin.Close(ctx)

	tmpl, err := templateName()
	if err != nil {
		return err
	}
	// One process at a time builds the template and clones from it: CREATE
	// DATABASE … TEMPLATE fails while anyone else is connected to the template.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(774411)`); err != nil {
		return fmt.Errorf("pgtest: lock: %w", err)
	}
	defer func() { _, _ = admin.Exec(context.Background(), `SELECT pg_advisory_unlock(774411)`) }()

	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, tmpl).Scan(&exists); err != nil {
		return fmt.Errorf("pgtest: look up template: %w", err)
	}
	if !exists {
		building := tmpl + "_build"
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)")
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
			return fmt.Errorf("pgtest: create template: %w", err)
		}
		if err := postgres.Migrate(ctx, withDB(BaseURL(), building), slog.New(slog.DiscardHandler)); err != nil {
			return fmt.Errorf("pgtest: migrate template: %w", err)
		}
		// Rename only when complete, so a crash never leaves a half-built template.
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
			return fmt.Errorf("pgtest: finish template: %w", err)
		}
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	dbName = "tollgate_test_" + hex.EncodeToString(suffix[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{dbName}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: clone template: %w", err)
	}
	dbURL = withDB(BaseURL(), dbName)
	pool, err = postgres.Open(ctx, dbURL, 0)
	return err
}

// templateName changes whenever a migration file changes.
func templateName() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("pgtest: hash migrations: %w", err)
	}
	h.Write([]byte(postgres.SchemaTag))
	return "tollgate_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// withDB swaps the database name in a postgres URL.
func withDB(base, name string) string {
	rest := ""
	if i := strings.IndexByte(base, '?'); i >= 0 {
		base, rest = base[:i], base[i:]
	}
	i := strings.LastIndexByte(base, '/')
	return base[:i+1] + name + rest
}

// Isolated gives the test a database of its own, cloned from the same
// template as the package's and dropped when the test ends, with its URL
// (for processes the test starts). Tests whose work is not keyed by their
// own ids alone, such as River workers that take any job of the database,
// use it to run in parallel (t.Parallel) without working each other's rows.
func Isolated(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	New(t) // builds the template once, and skips or fails without a server
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(context.Background())
	tmpl, err := templateName()
	if err != nil {
		t.Fatal(err)
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	name := "tollgate_test_" + hex.EncodeToString(suffix[:])
	// The lock setup takes: a template being built is never cloned.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(774411)`); err != nil {
		t.Fatalf("pgtest: lock: %v", err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize())
	_, _ = admin.Exec(context.Background(), `SELECT pg_advisory_unlock(774411)`)
	if err != nil {
		t.Fatalf("pgtest: clone template: %v", err)
	}
	url := withDB(BaseURL(), name)
	p, err := postgres.Open(ctx, url, 0)
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, BaseURL()); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	return p, url
}
