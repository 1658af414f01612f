package postgres_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/migrations"
)

// Migration 36 (issue 25) carries each plan's one stripe_price_id over as
// its first (default) price, and each add-on's price as its own first
// price, so that subscriptions on them still map after the upgrade.
func TestMigrationCarriesExistingPricesIntoTheCatalogue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := freshDB(t)
	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url, slog.New(slog.DiscardHandler)); err != nil {
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
	if _, err := p.DownTo(ctx, 35); err != nil {
		t.Fatalf("down to 35: %v", err)
	}
	for _, q := range []string{
		`INSERT INTO plans (key, name, stripe_price_id) VALUES ('pro', 'Pro', 'price_pro_monthly'), ('free', 'Free', NULL)`,
		`INSERT INTO addon_grants (stripe_price_id, name, features) VALUES ('price_addon', 'Add-on', '{x}')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT stripe_price_id, coalesce(plan_key, ''), coalesce(addon_price_id, ''), position FROM catalogue_prices ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var price, plan, addon string
		var pos int
		if err := rows.Scan(&price, &plan, &addon, &pos); err != nil {
			t.Fatal(err)
		}
		got = append(got, price+"|"+plan+"|"+addon+"|"+string(rune('0'+pos)))
	}
	want := []string{"price_addon||price_addon|0", "price_pro_monthly|pro||0"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("catalogue_prices %v, want %v", got, want)
	}
}
