package entitlements

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
)

// Options configure a Service. Every field has a usable zero value.
type Options struct {
	// DefaultPlan is the plan of tenants whose subscription ended; default "free".
	DefaultPlan string
	// GracePeriod is how long past_due keeps the plan when the subscription
	// row carries no grace_ends_at; default 7 days.
	GracePeriod time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// RedisReadTimeout bounds the snapshot reads and best-effort write-backs
	// of the read path (CachedSnapshot, ReloadSnapshot); default 100ms. Postgres is
	// the system of record, so with Redis slow or dead a read falls back to
	// it instead of waiting out go-redis's retries.
	RedisReadTimeout time.Duration
	// RedisTimeout bounds each attempt of a snapshot's publish after a
	// commit; default 250ms. The change is
	// committed in Postgres by then, so a Redis that does not answer costs
	// the request at most three attempts, never go-redis's seconds of
	// retries.
	RedisTimeout time.Duration
	// OnChange, when set, is told of every version bump inside its
	// transaction (cmd wires notify's outbox: entitlements.updated and
	// subscription.status commit with the change). An error rolls the
	// change back. Default nil.
	OnChange func(ctx context.Context, tx pgx.Tx, c Change) error
}

// Change is one version bump: the snapshot before it (zero Version when
// the tenant had none recorded) and after, and the bump's reason.
type Change struct {
	Before, After limiter.Snapshot
	Reason        string
}

// Service is the entitlements domain: tenants, overrides, snapshots.
// API keys and service tokens are internal/credentials'.
type Service struct {
	db    *pgxpool.Pool
	store *limitstore.Store
	log   *slog.Logger
	opts  Options
}

// NewService builds the service. store may be nil in tools that never
// publish (then PublishToRedis is a no-op).
func NewService(db *pgxpool.Pool, store *limitstore.Store, log *slog.Logger, opts Options) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultPlan == "" {
		opts.DefaultPlan = "free"
	}
	if opts.GracePeriod == 0 {
		opts.GracePeriod = 7 * 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RedisReadTimeout == 0 {
		opts.RedisReadTimeout = 100 * time.Millisecond
	}
	if opts.RedisTimeout <= 0 {
		opts.RedisTimeout = 250 * time.Millisecond
	}
	return &Service{db: db, store: store, log: log, opts: opts}
}

// DefaultPlan is the plan tenants fall back to.
func (s *Service) DefaultPlan() string { return s.opts.DefaultPlan }

// PublishToRedis writes a snapshot to Redis as it is (and announces it to
// every limiter): no version, nothing in Postgres. It is the last step of
// every write path (BumpVersionTx's caller, BumpAndPublish,
// WriteAndPublish) and of ReloadSnapshot.
func (s *Service) PublishToRedis(ctx context.Context, snap limiter.Snapshot) error {
	if s.store == nil {
		return nil
	}
	if err := s.store.PutSnapshot(ctx, snap); err != nil {
		return fmt.Errorf("entitlements: publish snapshot: %w", err)
	}
	return nil
}

// publishAll publishes snapshots after a commit, a few at a time so that a
// plan with many tenants still reaches all of them within a second; each
// is retried as publishRetried does.
func (s *Service) publishAll(ctx context.Context, snaps []limiter.Snapshot) {
	var g errgroup.Group
	g.SetLimit(16)
	for _, snap := range snaps {
		g.Go(func() error { s.publishRetried(ctx, snap); return nil })
	}
	_ = g.Wait()
}

// pgError names the field of a constraint violation (postgres.ConstraintError).
func pgError(err error) error { return postgres.ConstraintError(err, fieldOfConstraint) }

// fieldOfConstraint names the field of a constraint on entitlements'
// tables (tenants, quota_overrides); the catalogue maps its own.
func fieldOfConstraint(constraint, column string) string {
	switch constraint {
	case "tenants_stripe_customer_id_key":
		return "stripe_customer_id"
	case "tenants_external_id_key", "tenants_external_id_check":
		return "external_id"
	case "tenants_plan_key_fkey":
		return "plan"
	}
	// Postgres names check constraints <table>_<column>_check.
	for _, col := range []string{"stripe_customer_id", "quota_limit", "name", "meter", "mode"} {
		if strings.Contains(constraint, "_"+col+"_") {
			if col == "quota_limit" {
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
