// Package billing follows Stripe: it verifies and stores webhook events,
// applies them to subscriptions and tenants (serialised per Stripe customer,
// idempotent, safe against out-of-order delivery), changes plans through
// Stripe, and repairs drift by re-reading Stripe.
//
// Rules this package keeps (see docs/stripe.md):
//   - An event is answered 2xx only once it is stored; storing it and
//     enqueueing its job happen in one transaction, so nothing stored is
//     left unprocessed and nothing unstored is acknowledged.
//   - Stripe is never called inside a database transaction.
//   - Billing writes tenants only through entitlements.WriteAndPublish, which bumps
//     every changed tenant's entitlement version in the same transaction and
//     publishes it to the limiter after the commit.
//   - subscriptions.last_event_at is the created time of the newest event
//     applied to a subscription; an older event is stale and ignored, and a
//     canceled subscription is never revived.
package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// Defaults of Options.
const (
	DefaultGracePeriod   = 7 * 24 * time.Hour
	DefaultStripeTimeout = 10 * time.Second
	// MaxWebhookBody is the largest webhook body read (stripe.md: 512 KiB).
	MaxWebhookBody = 512 << 10
	// SignatureTolerance is how old a signed timestamp may be, and how far
	// ahead of our clock it may be.
	SignatureTolerance = 5 * time.Minute
	// MaxAttempts of an event's job; after the last one the event is failed.
	MaxAttempts = 8
)

// Options configure a Service. Zero values take the defaults noted.
type Options struct {
	// WebhookSecret (STRIPE_WEBHOOK_SECRET). Empty: the webhook answers 503.
	WebhookSecret string
	// WebhookSecretPrevious (STRIPE_WEBHOOK_SECRET_PREVIOUS) is still
	// accepted while a rotation is under way.
	WebhookSecretPrevious string
	// SecretKey (STRIPE_SECRET_KEY). Empty: no outbound Stripe calls; plan
	// changes are local and resync is unavailable.
	SecretKey string
	// APIBase (STRIPE_API_BASE) overrides Stripe's API URL (stripe-mock).
	APIBase string
	// Proration of plan changes through Stripe (STRIPE_PRORATION): one of
	// the Proration constants; default ProrationCreate.
	Proration string
	// StripeTimeout bounds every outbound call; default 10s.
	StripeTimeout time.Duration
	// GracePeriod (GRACE_PERIOD) a past_due subscription keeps its plan;
	// default 7 days.
	GracePeriod time.Duration
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Credits, when set, grants top-ups: what a paid payment-mode Checkout
	// Session or a paid invoice bought of prices mapped to one. Nil: such
	// payments are ignored.
	Credits Credits
	// BeforeApply, when set, runs inside the processing transaction just
	// before an event is applied. Tests use it to stop a worker mid-event.
	BeforeApply func(ctx context.Context, eventID string) error
}

// Service is billing: intake, processing, admin views, plan changes, resync.
type Service struct {
	db     *pgxpool.Pool
	ents   *entitlements.Service
	cat    *catalogue.Service
	jobs   *river.Client[pgx.Tx]
	log    *slog.Logger
	opts   Options
	stripe *client.API // nil when Stripe is not configured
	m      *metrics
	prices priceCache // what the dashboard shows of each plan price
}

// New builds the service. jobs is a River client used only to insert (the
// api's insert-only client or the worker's own); cat is where plans and
// their prices are read.
func New(db *pgxpool.Pool, ents *entitlements.Service, cat *catalogue.Service, jobs *river.Client[pgx.Tx], log *slog.Logger, opts Options) (*Service, error) {
	if db == nil || ents == nil || cat == nil || jobs == nil {
		return nil, errors.New("billing: db, entitlements, catalogue and jobs are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.StripeTimeout == 0 {
		opts.StripeTimeout = DefaultStripeTimeout
	}
	if opts.Proration == "" {
		opts.Proration = ProrationCreate
	}
	if !ValidProration(opts.Proration) {
		return nil, fmt.Errorf("billing: proration %q is not one of create_prorations, always_invoice, none, pending_if_incomplete", opts.Proration)
	}
	if opts.GracePeriod == 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("billing: metrics: %w", err)
	}
	s := &Service{db: db, ents: ents, cat: cat, jobs: jobs, log: log, opts: opts, m: m}
	if opts.Registerer != nil {
		if _, err := register(opts.Registerer, prometheus.Collector(newBacklogCollector(s))); err != nil {
			return nil, fmt.Errorf("billing: metrics: %w", err)
		}
	}
	if opts.SecretKey != "" {
		s.stripe = newStripeClient(opts.SecretKey, opts.APIBase)
	}
	return s, nil
}

// StripeConfigured reports whether outbound Stripe calls are possible.
func (s *Service) StripeConfigured() bool { return s.stripe != nil }
