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

	"github.com/tollgatehq/tollgate/migrations"
)

// riverVersion is the goose version under which River's own migrations run,
// so that one migration set (and one lock) covers our tables and River's.
const riverVersion = 2

// SchemaTag changes when the Go-registered migrations change (River's
// version), so test templates built from an older schema are not reused.
const SchemaTag = "river-v0.51.2"

// Migrate applies every pending migration. A Postgres session advisory lock
// (goose's session locker) serialises concurrent runs: the others wait, then
// find nothing left to do.
func Migrate(ctx context.Context, url string, log *slog.Logger) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return fmt.Errorf("postgres: open for migrate: %w", err)
	}
	defer db.Close()
	return migrateDB(ctx, db, log)
}

func migrateDB(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("postgres: session locker: %w", err)
	}
	// River's migrations add an enum value and then use it, which Postgres
	// forbids inside one transaction, so this step runs without goose's
	// transaction: River applies each of its versions in its own, and a rerun
	// after a crash applies only what is missing.
	river := goose.NewGoMigration(riverVersion,
		&goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
			m, err := rivermigrate.New(riverdatabasesql.New(db), nil)
			if err != nil {
				return err
			}
			_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
			return err
		}},
		&goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
			m, err := rivermigrate.New(riverdatabasesql.New(db), nil)
			if err != nil {
				return err
			}
			_, err = m.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1})
			return err
		}},
	)
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker),
		goose.WithGoMigrations(river),
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

// The pgx stdlib driver registers itself as "pgx"; keep the import used.
var _ = stdlib.GetDefaultDriver
