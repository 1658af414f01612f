// Package credits keeps prepaid units of a meter beside a plan's included
// quota: grants (issued by an admin, bought as a top-up, mirrored from a
// Stripe credit grant, rolled over from a closed period), the durable ledger
// of what each grant gave in each period, and the bookkeeping of voids and
// expiries. It owns the credit_* tables; others call its functions.
//
// The limiter draws grants after the included quota in its decision (exact
// and batched modes), from the list this package writes to Redis
// (Publish, redis.go) and rebuilds from RedisGrants after a loss;
// docs/credits.md says how.
package credits

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
)

// Entitlements is what credits asks of the entitlements owner: whether a
// tenant exists, and (for rollover) its included quota and periods.
// *entitlements.Service is one.
type Entitlements interface {
	GetTenantRow(ctx context.Context, id string) (entitlements.Tenant, error)
	SnapshotFromPostgres(ctx context.Context, tenantID string) (limiter.Snapshot, error)
}

// Catalogue is what credits asks of the product catalogue: whether a plan
// defines a meter, and the plans' rollover settings. *catalogue.Service
// is one.
type Catalogue interface {
	MeterDefined(ctx context.Context, meter string) (bool, error)
	ListPlans(ctx context.Context) ([]catalogue.Plan, error)
}

// Options of the service. Zero values take the defaults noted.
type Options struct {
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Events, when set, is told of grants running low, depleted and
	// expired, in the transaction that did it (cmd/worker hands notify's
	// grant.* webhooks).
	Events EventsFunc
	// LowPercent: a grant is low once its remaining is under this share of
	// its amount; default DefaultLowPercent (20).
	LowPercent int
	// Grants writes grants where the limiter draws them (limitstore's
	// Store); nil: nothing is written (the limiter then draws none).
	Grants GrantWriter
}

// Service is the credits domain.
type Service struct {
	db   *pgxpool.Pool
	ents Entitlements
	cat  Catalogue
	log  *slog.Logger
	opts Options

	growMu sync.Mutex
	grow   map[string]canGrowEntry // CanGrow's recent answers
}

// NewService returns the service on db.
func NewService(db *pgxpool.Pool, ents Entitlements, cat Catalogue, log *slog.Logger, opts Options) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LowPercent <= 0 || opts.LowPercent > 100 {
		opts.LowPercent = DefaultLowPercent
	}
	return &Service{db: db, ents: ents, cat: cat, log: log, opts: opts}
}

// now is the clock truncated to microseconds, what Postgres keeps, so that
// a grant read back equals the one answered.
func (s *Service) now() time.Time { return s.opts.Now().UTC().Truncate(time.Microsecond) }
