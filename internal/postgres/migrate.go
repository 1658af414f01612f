package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tollgatehq/tollgate/internal/logging"
	"github.com/tollgatehq/tollgate/migrations"
)

// riverPlaceholder is the goose version that once ran River's migrations.
// River now migrates on its own line (its river_migration table) on every
// start, so an upgrade of River migrates existing databases too; the version
// stays, doing nothing, so databases that recorded it and new ones agree.
const riverPlaceholder = 2

// riverLockKey is the session advisory lock that serialises River's
// migrator across processes starting at once (goose has its own).
const riverLockKey int64 = 0x74676d72697665 // "tgmrive"

// SchemaTag changes when the Go-registered migrations change (River's
// version), so test templates built from an older schema are not reused.
const SchemaTag = "river-v0.51.2"

// Migrate applies River's pending migrations (rivermigrate, on River's own
// line) and then ours (goose). Postgres session advisory locks serialise
// concurrent runs: the others wait, then find nothing left to do.
func Migrate(ctx context.Context, url string, log *slog.Logger) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return fmt.Errorf("postgres: open for migrate: %w", err)
	}
	defer db.Close()
	return migrateDB(ctx, db, log)
}

func migrateDB(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	if err := migrateRiver(ctx, db, log); err != nil {
		return err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("postgres: session locker: %w", err)
	}
	noop := goose.NewGoMigration(riverPlaceholder, &goose.GoFunc{Mode: goose.TransactionEnabled}, &goose.GoFunc{Mode: goose.TransactionEnabled})
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker),
		goose.WithGoMigrations(noop),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("postgres: goose provider: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	for _, r := range results {
		log.InfoContext(ctx, "migration applied", "version", r.Source.Version, "duration", r.Duration)
	}
	return nil
}

// migrateRiver brings River's schema to the version this build's River
// expects. River's migrations add an enum value and then use it, which
// Postgres forbids inside one transaction, so River applies each version in
// its own, and a rerun after a crash applies only what is missing.
func migrateRiver(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("postgres: river migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, riverLockKey); err != nil {
		return fmt.Errorf("postgres: river migrate lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must go even when ctx has ended (the
		// session would release it on close anyway; this keeps a pooled
		// connection from holding it).
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, riverLockKey)
	}()
	m, err := rivermigrate.New(riverdatabasesql.New(db), &rivermigrate.Config{Logger: logging.Demote(log)})
	if err != nil {
		return fmt.Errorf("postgres: river migrator: %w", err)
	}
	res, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("postgres: river migrate: %w", err)
	}
	// One line per migration (rivermigrate's own are DEBUG, or each would
	// be logged twice).
	for _, v := range res.Versions {
		log.InfoContext(ctx, "river migration applied", "version", v.Version, "name", v.Name, "duration", v.Duration)
	}
	return nil
}

// The pgx stdlib driver registers itself as "pgx"; keep the import used.
var _ = stdlib.GetDefaultDriver
