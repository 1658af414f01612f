package catalogue

import (
	"context"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Options configure a Service. Every field has a usable zero value.
type Options struct {
	// Touch, when set, brings the tenants a change reaches up to date
	// inside the change's transaction: it is called last in the
	// transaction of every plan edit and add-on change (after the
	// catalogue's own writes, so that what it reads is the new catalogue),
	// and again in a preview's, which is rolled back. It returns the
	// tenants reached and what to do once the change has committed (publish
	// their snapshots), which the catalogue runs only after the commit and
	// never for a preview. An error rolls the change back. cmd wires
	// entitlements.Service.TouchCatalogue: the tenants and their versions
	// are entitlements', so the catalogue names none of their tables.
	// Default nil: a change reaches no tenant (tools without tenants).
	Touch func(ctx context.Context, tx pgx.Tx, r Reach) (Touched, error)
}

// Reach is what a change tells Touch: which plan, or which add-on's prices
// and products, changed.
type Reach struct {
	// Plan is the plan edited; "" for an add-on change.
	Plan string
	// Keep, when above 0, is the version the tenants following Plan keep
	// (an edit with "apply": "new"): they are pinned to it, so the edit
	// reaches none of them.
	Keep int64
	// Prices and Products are an add-on's, as it was and as it is: the
	// tenants with a subscription item of one of them are reached.
	Prices, Products []string
	// Reason is the entitlement_versions reason of the tenants' bumps.
	Reason string
	// Preview: the transaction will be rolled back; list the tenants
	// reached and bump none (a plan with many tenants stays a quick
	// preview).
	Preview bool
}

// Touched is Touch's answer: the tenants reached, sorted, and what to run
// after the commit (nil: nothing).
type Touched struct {
	Tenants     []string
	AfterCommit func(ctx context.Context)
}

// Service is the product catalogue: plans and their versions, add-ons, and
// the Stripe prices and products that map to them.
type Service struct {
	db   *pgxpool.Pool
	log  *slog.Logger
	opts Options
	// meters caches which meters any plan defines (MeterDefined).
	meters meterSet
}

// NewService builds the service; log nil discards.
func NewService(db *pgxpool.Pool, log *slog.Logger, opts Options) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{db: db, log: log, opts: opts}
}

// touch runs the Touch hook inside tx; without one nothing is reached.
func (s *Service) touch(ctx context.Context, tx pgx.Tx, r Reach) (Touched, error) {
	if s.opts.Touch == nil {
		return Touched{}, nil
	}
	return s.opts.Touch(ctx, tx, r)
}

// committed runs what Touch left for after the commit.
func committed(ctx context.Context, t Touched) {
	if t.AfterCommit != nil {
		t.AfterCommit(ctx)
	}
}

// dryRun runs fn in a transaction that is rolled back (postgres.DryRun).
func (s *Service) dryRun(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return postgres.DryRun(ctx, s.db, fn)
}

// pgError names the field of a constraint violation (postgres.ConstraintError).
func pgError(err error) error { return postgres.ConstraintError(err, fieldOfConstraint) }

func fieldOfConstraint(constraint, column string) string {
	switch constraint {
	case "plans_pkey":
		return "key"
	case "plans_stripe_price_id_key":
		return "stripe_price_id"
	case "plan_quotas_pkey":
		return "quotas"
	}
	// Postgres names check constraints <table>_<column>_check.
	for _, col := range []string{"stripe_price_id", "rate_per_second", "rate_burst", "concurrency", "quota_limit", "name", "key", "meter", "mode"} {
		if strings.Contains(constraint, "_"+col+"_") {
			switch col {
			case "rate_per_second":
				return "rate.per_second"
			case "rate_burst":
				return "rate.burst"
			case "quota_limit":
				return "quotas"
			}
			return col
		}
	}
	if column != "" {
		return column
	}
	return "body"
}
