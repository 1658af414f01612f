package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// store is the read model of the dashboard and the console: plain queries
// over the schema, each scoped by the tenant id it is given. Writes that
// change what a tenant may do go through the other parts' services; the only
// tables written here are the web's own (sessions and dashboard links).
type store struct {
	db *pgxpool.Pool
}

// notFound turns "no rows" and malformed ids into apperr NotFound, so that
// a bad or foreign id in a URL is a 404 and never a 500.
func notFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return apperr.New(apperr.NotFound, "%s not found", what)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "22P02" || pe.Code == "23503") { // invalid_text_representation, foreign_key_violation
		return apperr.New(apperr.NotFound, "%s not found", what)
	}
	return err
}

// TenantRow is a tenant as the pages show it.
type TenantRow struct {
	ID                 string
	Name               string
	PlanKey            string
	PlanName           string
	StripeCustomerID   string
	StripeFeatures     []string
	PeriodAnchor       time.Time
	EntitlementVersion int64
	CreatedAt          time.Time
	SubStatus          string // "" when the tenant has no subscription
}

// SubscriptionRow is the tenant's current subscription
// (entitlements.CurrentSubscriptionOf: the one the limiter enforces).
type SubscriptionRow struct {
	ID                 string
	Status             string
	PriceID            string
	PeriodStart        *time.Time
	PeriodEnd          *time.Time
	CancelAtPeriodEnd  bool
	TrialEnd           *time.Time
	TrialWillEndAt     *time.Time
	PastDueSince       *time.Time
	GraceEndsAt        *time.Time
	PaymentAttempts    int
	NextPaymentAttempt *time.Time
	CanceledAt         *time.Time
	UpdatedAt          time.Time
}

func (s *store) tenant(ctx context.Context, id string) (TenantRow, error) {
	if !ids.IsUUID(id) {
		return TenantRow{}, apperr.New(apperr.NotFound, "tenant not found")
	}
	var t TenantRow
	var cus *string
	err := s.db.QueryRow(ctx, `
		SELECT t.id, t.name, t.plan_key, p.name, t.stripe_customer_id, t.stripe_features,
		       t.period_anchor, t.entitlement_version, t.created_at,
		       COALESCE((SELECT s.status FROM (`+entitlements.CurrentSubscriptionOf("t.id")+`) s), '')
		FROM tenants t JOIN plans p ON p.key = t.plan_key
		WHERE t.id = $1`, id).Scan(&t.ID, &t.Name, &t.PlanKey, &t.PlanName, &cus, &t.StripeFeatures,
		&t.PeriodAnchor, &t.EntitlementVersion, &t.CreatedAt, &t.SubStatus)
	if err != nil {
		return TenantRow{}, fmt.Errorf("web: tenant: %w", notFound(err, "tenant"))
	}
	if cus != nil {
		t.StripeCustomerID = *cus
	}
	return t, nil
}

func (s *store) subscription(ctx context.Context, tenantID string) (*SubscriptionRow, error) {
	var r SubscriptionRow
	var price *string
	err := s.db.QueryRow(ctx, `
		SELECT id, status, stripe_price_id, current_period_start, current_period_end, cancel_at_period_end,
		       trial_end, trial_will_end_at, past_due_since, grace_ends_at, payment_attempts,
		       next_payment_attempt, canceled_at, updated_at
		FROM (`+entitlements.CurrentSubscriptionOf("$1")+`) s`, tenantID).Scan(
		&r.ID, &r.Status, &price, &r.PeriodStart, &r.PeriodEnd, &r.CancelAtPeriodEnd, &r.TrialEnd,
		&r.TrialWillEndAt, &r.PastDueSince, &r.GraceEndsAt, &r.PaymentAttempts, &r.NextPaymentAttempt,
		&r.CanceledAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("web: subscription: %w", err)
	}
	if price != nil {
		r.PriceID = *price
	}
	return &r, nil
}

// DayUsage is the usage of one meter on one UTC day.
type DayUsage struct {
	Day   time.Time
	Meter string
	Used  int64
}

// dailyUsage sums the hourly history per UTC day in [from, to). The hour
// the period starts in counts whole: a period starting at 10:37 keeps its
// usage of 10:37–11:00 in the 10:00 row, which "hour >= from" dropped.
func (s *store) dailyUsage(ctx context.Context, tenantID string, from, to time.Time) ([]DayUsage, error) {
	rows, err := s.db.Query(ctx, `
		SELECT date_trunc('day', hour AT TIME ZONE 'UTC') AS day, meter, sum(used)::bigint
		FROM usage_hourly WHERE tenant_id = $1 AND hour >= date_trunc('hour', $2::timestamptz) AND hour < $3
		GROUP BY 1, 2 ORDER BY 1, 2`, tenantID, from, to)
	if err != nil {
		return nil, fmt.Errorf("web: daily usage: %w", err)
	}
	var out []DayUsage
	var d DayUsage
	_, err = pgx.ForEachRow(rows, []any{&d.Day, &d.Meter, &d.Used}, func() error {
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: daily usage: %w", err)
	}
	return out, nil
}

// DayRefusals is the refused requests of one policy on one UTC day.
type DayRefusals struct {
	Day     time.Time
	Policy  string
	Refused int64
}

func (s *store) dailyRefusals(ctx context.Context, tenantID string, from, to time.Time) ([]DayRefusals, error) {
	rows, err := s.db.Query(ctx, `
		SELECT day, policy, refused FROM refusals_daily
		WHERE tenant_id = $1 AND day >= $2::date AND day <= $3::date ORDER BY day, policy`,
		tenantID, from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("web: refusals: %w", err)
	}
	var out []DayRefusals
	var d DayRefusals
	_, err = pgx.ForEachRow(rows, []any{&d.Day, &d.Policy, &d.Refused}, func() error {
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: refusals: %w", err)
	}
	return out, nil
}

// KeyRow is an API key as people see it: never the key, only its prefix.
type KeyRow struct {
	ID         string
	Prefix     string
	Name       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

func (s *store) keys(ctx context.Context, tenantID string) ([]KeyRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT id, prefix, name, created_at, last_used_at, revoked_at FROM api_keys
		WHERE tenant_id = $1 ORDER BY revoked_at IS NOT NULL, created_at DESC LIMIT 100`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("web: keys: %w", err)
	}
	var out []KeyRow
	var k KeyRow
	_, err = pgx.ForEachRow(rows, []any{&k.ID, &k.Prefix, &k.Name, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt}, func() error {
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: keys: %w", err)
	}
	return out, nil
}

// keyOwnedBy reports whether the key belongs to the tenant: the dashboard
// checks it before revoking, so that another tenant's key id is a 404.
func (s *store) keyOwnedBy(ctx context.Context, keyID, tenantID string) error {
	if !ids.IsUUID(keyID) {
		return apperr.New(apperr.NotFound, "API key not found")
	}
	var one int
	err := s.db.QueryRow(ctx, `SELECT 1 FROM api_keys WHERE id = $1 AND tenant_id = $2`, keyID, tenantID).Scan(&one)
	if err != nil {
		return fmt.Errorf("web: key: %w", notFound(err, "API key"))
	}
	return nil
}

// PlanRow is a plan with its quotas.
type PlanRow struct {
	Key           string
	Name          string
	StripePriceID string
	RatePerSecond *float64
	RateBurst     *int64
	Concurrency   *int64
	Features      []string
	Quotas        []QuotaRow
	Tenants       int64 // tenants on the plan
	UpdatedAt     time.Time
	QuotaWindow   string // "month" or "billing_period"
}

// QuotaRow is one meter's monthly quota of a plan.
type QuotaRow struct {
	Meter   string
	Limit   int64
	Mode    string
	PerSeat bool // Limit × the plan item's quantity
}

func (s *store) plans(ctx context.Context) ([]PlanRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT p.key, p.name, COALESCE(p.stripe_price_id, ''), p.rate_per_second, p.rate_burst, p.concurrency,
		       p.features, p.updated_at, p.quota_window,
		       (SELECT count(*) FROM tenants t WHERE t.plan_key = p.key),
		       COALESCE((SELECT json_agg(json_build_object('meter', q.meter, 'limit', q.quota_limit, 'mode', q.mode, 'per_seat', q.per_seat) ORDER BY q.meter)
		                 FROM plan_quotas q WHERE q.plan_key = p.key), '[]')
		FROM plans p ORDER BY p.key`)
	if err != nil {
		return nil, fmt.Errorf("web: plans: %w", err)
	}
	var out []PlanRow
	var p PlanRow
	var quotas []byte
	_, err = pgx.ForEachRow(rows, []any{&p.Key, &p.Name, &p.StripePriceID, &p.RatePerSecond, &p.RateBurst, &p.Concurrency,
		&p.Features, &p.UpdatedAt, &p.QuotaWindow, &p.Tenants, &quotas}, func() error {
		var qs []struct {
			Meter   string `json:"meter"`
			Limit   int64  `json:"limit"`
			Mode    string `json:"mode"`
			PerSeat bool   `json:"per_seat"`
		}
		if err := json.Unmarshal(quotas, &qs); err != nil {
			return err
		}
		p.Quotas = nil
		for _, q := range qs {
			p.Quotas = append(p.Quotas, QuotaRow{Meter: q.Meter, Limit: q.Limit, Mode: q.Mode, PerSeat: q.PerSeat})
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: plans: %w", err)
	}
	return out, nil
}

func (s *store) plan(ctx context.Context, key string) (PlanRow, error) {
	ps, err := s.plans(ctx)
	if err != nil {
		return PlanRow{}, err
	}
	for _, p := range ps {
		if p.Key == key {
			return p, nil
		}
	}
	return PlanRow{}, apperr.New(apperr.NotFound, "plan %q not found", key)
}

// TenantListRow is one line of the console's tenant list.
type TenantListRow struct {
	ID           string
	Name         string
	PlanKey      string
	SubStatus    string
	Requests     int64 // durable usage of the "requests" meter in the open period
	RequestLimit *int64
	CreatedAt    time.Time
}

// tenantPage lists tenants whose name or id or Stripe customer matches q,
// newest first, page by page (1-based).
func (s *store) tenantPage(ctx context.Context, q string, page, size int) ([]TenantListRow, int64, error) {
	like := "%"
	if q = strings.TrimSpace(q); q != "" {
		like = "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(strings.ToLower(q)) + "%"
	}
	var total int64
	if err := s.db.QueryRow(ctx, `
		SELECT count(*) FROM tenants
		WHERE lower(name) LIKE $1 OR id::text = $2 OR stripe_customer_id = $2`, like, q).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("web: count tenants: %w", err)
	}
	rows, err := s.db.Query(ctx, `
		SELECT t.id, t.name, t.plan_key,
		       COALESCE((SELECT s.status FROM (`+entitlements.CurrentSubscriptionOf("t.id")+`) s), ''),
		       COALESCE((SELECT used FROM usage_periods u WHERE u.tenant_id = t.id AND u.meter = 'requests'
		                 AND u.period_start <= now() AND u.period_end > now() ORDER BY period_start DESC LIMIT 1), 0),
		       (SELECT quota_limit FROM plan_quotas q WHERE q.plan_key = t.plan_key AND q.meter = 'requests'),
		       t.created_at
		FROM tenants t
		WHERE lower(t.name) LIKE $1 OR t.id::text = $2 OR t.stripe_customer_id = $2
		ORDER BY t.created_at DESC, t.id DESC
		LIMIT $3 OFFSET $4`, like, q, size, (page-1)*size)
	if err != nil {
		return nil, 0, fmt.Errorf("web: tenants: %w", err)
	}
	var out []TenantListRow
	var r TenantListRow
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Name, &r.PlanKey, &r.SubStatus, &r.Requests, &r.RequestLimit, &r.CreatedAt}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("web: tenants: %w", err)
	}
	return out, total, nil
}

// OverrideRow is an admin-granted quota change.
type OverrideRow struct {
	ID        string
	Meter     string
	Extra     *int64
	Limit     *int64
	Mode      *string
	Reason    string
	ExpiresAt *time.Time
	CreatedAt time.Time
}

func (s *store) overrides(ctx context.Context, tenantID string) ([]OverrideRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT id, meter, extra, quota_limit, mode, reason, expires_at, created_at FROM quota_overrides
		WHERE tenant_id = $1 ORDER BY created_at DESC LIMIT 100`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("web: overrides: %w", err)
	}
	var out []OverrideRow
	var o OverrideRow
	_, err = pgx.ForEachRow(rows, []any{&o.ID, &o.Meter, &o.Extra, &o.Limit, &o.Mode, &o.Reason, &o.ExpiresAt, &o.CreatedAt}, func() error {
		out = append(out, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: overrides: %w", err)
	}
	return out, nil
}

// VersionRow is one entitlement version.
type VersionRow struct {
	Version   int64
	Reason    string
	CreatedAt time.Time
}

func (s *store) versions(ctx context.Context, tenantID string, limit int) ([]VersionRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT version, reason, created_at FROM entitlement_versions
		WHERE tenant_id = $1 ORDER BY version DESC LIMIT $2`, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("web: versions: %w", err)
	}
	var out []VersionRow
	var v VersionRow
	_, err = pgx.ForEachRow(rows, []any{&v.Version, &v.Reason, &v.CreatedAt}, func() error {
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: versions: %w", err)
	}
	return out, nil
}

// EventRow is a stored Stripe event.
type EventRow struct {
	ID            string
	Type          string
	CustomerID    string
	TenantID      string
	Created       time.Time
	ReceivedAt    time.Time
	Status        string
	IgnoredReason string
	APIVersion    string // the Stripe API version the event was sent in ("" for thin events)
	Attempts      int
	LastError     string
	ProcessedAt   *time.Time
	Payload       string // pretty JSON; only filled by event()
}

const eventCols = `id, type, COALESCE(stripe_customer_id, ''), COALESCE(tenant_id::text, ''), event_created, received_at,
	status, COALESCE(ignored_reason, ''), attempts, COALESCE(last_error, ''), processed_at, api_version`

func scanEvents(rows pgx.Rows) ([]EventRow, error) {
	var out []EventRow
	var e EventRow
	_, err := pgx.ForEachRow(rows, []any{&e.ID, &e.Type, &e.CustomerID, &e.TenantID, &e.Created, &e.ReceivedAt,
		&e.Status, &e.IgnoredReason, &e.Attempts, &e.LastError, &e.ProcessedAt, &e.APIVersion}, func() error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// events lists events, newest first, optionally of one status and one tenant.
func (s *store) events(ctx context.Context, status, tenantID string, limit int) ([]EventRow, error) {
	var tid *string
	if tenantID != "" {
		tid = &tenantID
	}
	rows, err := s.db.Query(ctx, `SELECT `+eventCols+` FROM stripe_events
		WHERE ($1 = '' OR status = $1) AND ($2::uuid IS NULL OR tenant_id = $2::uuid)
		ORDER BY received_at DESC LIMIT $3`, status, tid, limit)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	return out, nil
}

func (s *store) event(ctx context.Context, id string) (EventRow, error) {
	rows, err := s.db.Query(ctx, `SELECT `+eventCols+`, jsonb_pretty(payload) FROM stripe_events WHERE id = $1`, id)
	if err != nil {
		return EventRow{}, fmt.Errorf("web: event: %w", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (EventRow, error) {
		var e EventRow
		err := r.Scan(&e.ID, &e.Type, &e.CustomerID, &e.TenantID, &e.Created, &e.ReceivedAt,
			&e.Status, &e.IgnoredReason, &e.Attempts, &e.LastError, &e.ProcessedAt, &e.APIVersion, &e.Payload)
		return e, err
	})
	if err != nil {
		return EventRow{}, fmt.Errorf("web: event: %w", notFound(err, "Stripe event"))
	}
	return e, nil
}

// DriftRow is one repair made by the Stripe resync.
type DriftRow struct {
	ID             int64
	TenantID       string
	TenantName     string
	SubscriptionID string
	Field          string
	Ours           string
	Stripe         string
	RepairedAt     time.Time
}

func (s *store) drift(ctx context.Context, tenantID string, limit int) ([]DriftRow, error) {
	var tid *string
	if tenantID != "" {
		tid = &tenantID
	}
	rows, err := s.db.Query(ctx, `
		SELECT d.id, COALESCE(d.tenant_id::text, ''), COALESCE(t.name, ''), COALESCE(d.subscription_id, ''), d.field,
		       COALESCE(d.ours, ''), COALESCE(d.stripe, ''), d.repaired_at
		FROM drift_repairs d LEFT JOIN tenants t ON t.id = d.tenant_id
		WHERE ($1::uuid IS NULL OR d.tenant_id = $1::uuid)
		ORDER BY d.repaired_at DESC, d.id DESC LIMIT $2`, tid, limit)
	if err != nil {
		return nil, fmt.Errorf("web: drift: %w", err)
	}
	var out []DriftRow
	var d DriftRow
	_, err = pgx.ForEachRow(rows, []any{&d.ID, &d.TenantID, &d.TenantName, &d.SubscriptionID, &d.Field, &d.Ours, &d.Stripe, &d.RepairedAt}, func() error {
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: drift: %w", err)
	}
	return out, nil
}
