// Package notify sends Tollgate's events out as signed webhooks (Standard
// Webhooks 1.0): it owns the endpoints, the outbox of events written in the
// transaction of the change that caused them, and their deliveries, worked
// by a River job with retries.
package notify

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tollgatehq/tollgate/internal/jobs"
)

// Event types an endpoint may subscribe to, each documented in
// api/openapi.yaml's webhooks.
const (
	TypeQuotaThreshold      = "quota.threshold"
	TypeQuotaExhausted      = "quota.exhausted"
	TypeEntitlementsUpdated = "entitlements.updated"
	TypeSubscriptionStatus  = "subscription.status"
	TypePeriodClosed        = "period.closed"
	TypeGrantLow            = "grant.low"
	TypeGrantDepleted       = "grant.depleted"
	TypeGrantExpired        = "grant.expired"
)

// EventTypes are every type an endpoint may name in "events".
var EventTypes = []string{TypeQuotaThreshold, TypeQuotaExhausted, TypeEntitlementsUpdated,
	TypeSubscriptionStatus, TypePeriodClosed, TypeGrantLow, TypeGrantDepleted, TypeGrantExpired}

// DefaultBackoff is WEBHOOK_RETRY_BACKOFF's default: eight retries over
// about three days.
var DefaultBackoff = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Options of the service. Zero values take the defaults noted.
type Options struct {
	// AllowHTTP (WEBHOOK_ALLOW_HTTP) accepts http:// endpoint URLs; default
	// https only.
	AllowHTTP bool
	// AllowPrivate (WEBHOOK_ALLOW_PRIVATE) accepts and sends to loopback,
	// private, link-local and metadata addresses; default refused at
	// creation and at every send.
	AllowPrivate bool
	// Backoff (WEBHOOK_RETRY_BACKOFF) is the wait before each retry; a
	// delivery fails after len(Backoff) retries. Default DefaultBackoff.
	Backoff []time.Duration
	// Timeout of one POST; default 10s.
	Timeout time.Duration
	// Resolver looks endpoint hosts up at creation; default net.DefaultResolver.
	Resolver *net.Resolver
	// Insert enqueues the delivery jobs; default an insert-only client on db.
	Insert *river.Client[pgx.Tx]
	// SecretKey (WEBHOOK_SECRET_KEY) is the AES-256 key (32 bytes) that
	// seals endpoint secrets at rest. Default nil: endpoints cannot be
	// created or rotated (ErrNoSecretKey, a 503) and sealed secrets
	// cannot sign.
	SecretKey []byte
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Service manages endpoints and emits events.
type Service struct {
	db     *pgxpool.Pool
	log    *slog.Logger
	opts   Options
	insert *river.Client[pgx.Tx]
	box    *box
}

// NewService returns the service on db.
func NewService(db *pgxpool.Pool, log *slog.Logger, opts Options) (*Service, error) {
	if opts.Backoff == nil {
		opts.Backoff = DefaultBackoff
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	bx, err := newBox(opts.SecretKey)
	if err != nil {
		return nil, err
	}
	s := &Service{db: db, log: log, opts: opts, insert: opts.Insert, box: bx}
	if s.insert == nil {
		c, err := jobs.NewInsertClient(db, log)
		if err != nil {
			return nil, fmt.Errorf("notify: %w", err)
		}
		s.insert = c
	}
	return s, nil
}

// Register adds the delivery worker to workers (the worker process).
func (s *Service) Register(workers *river.Workers) {
	river.AddWorker(workers, &DeliverWorker{svc: s, client: s.httpClient()})
}

var pgxErrNoRows = pgx.ErrNoRows
