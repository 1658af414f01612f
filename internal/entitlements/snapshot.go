package entitlements

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/numfmt"
	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Subscription statuses that grant the tenant's own plan.
const (
	StatusActive   = "active"
	StatusTrialing = "trialing"
	StatusPastDue  = "past_due"
)

// inputs is everything a snapshot is computed from.
type inputs struct {
	tenant      Tenant
	plan        catalogue.Plan  // the tenant's plan
	defaultPlan *catalogue.Plan // nil when DEFAULT_PLAN does not exist
	sub         *Subscription
	overrides   []override
	// addons are the subscription's add-on items with what they grant.
	addons []addonItem
	// overlapping are the tenant's other live plan subscriptions (a
	// re-subscribe beside the old one): shown, never enforced.
	overlapping []string
	now         time.Time
}

// addonItem is one add-on item: its grant and the item's quantity.
type addonItem struct {
	price, name string
	sub         string // the subscription whose item it is
	quotas      map[string]int64
	features    []string
	qty         int64
}

// override is an unexpired quota_overrides row; id, reason and expiresAt
// only explain it.
type override struct {
	id         string
	meter      string
	extra      *int64
	quotaLimit *int64
	mode       *string
	notify     []keyspace.QuotaThreshold
	reason     string
	expiresAt  *time.Time
}

// loadInputs reads the tenant, its plan, the default plan, its most relevant
// subscription and its unexpired quota overrides.
func loadInputs(ctx context.Context, q postgres.Querier, tenantID string) (inputs, error) {
	t, err := getTenant(ctx, q, tenantID, false)
	if err != nil {
		return inputs{}, err
	}
	return inputs{tenant: t}, nil
}

// fill completes inputs with the plans, subscription and overrides; split
// from loadInputs so that the service's clock (not the database's) decides.
func (s *Service) fill(ctx context.Context, q postgres.Querier, in *inputs) error {
	in.now = s.opts.Now()
	plans, err := catalogue.ReadPlans(ctx, q, in.tenant.Plan, s.opts.DefaultPlan)
	if err != nil {
		return err
	}
	for i := range plans {
		if plans[i].Key == in.tenant.Plan {
			in.plan = plans[i]
		}
		if plans[i].Key == s.opts.DefaultPlan {
			in.defaultPlan = &plans[i]
		}
	}
	var sub Subscription
	err = q.QueryRow(ctx, `
SELECT id, status, coalesce(stripe_price_id, ''), current_period_start, current_period_end,
       cancel_at_period_end, trial_end, past_due_since, grace_ends_at, plan_quantity, coalesce(last_event_id, '')
  FROM current_subscriptions s WHERE s.tenant_id = $1`, in.tenant.ID).Scan(&sub.ID, &sub.Status, &sub.StripePriceID, &sub.CurrentPeriodStart, &sub.CurrentPeriodEnd,
		&sub.CancelAtPeriodEnd, &sub.TrialEnd, &sub.PastDueSince, &sub.GraceEndsAt, &sub.Seats, &sub.LastEventID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read subscription: %w", err)
	default:
		in.sub = &sub
		in.sub.Addons = []SubscriptionAddon{}
	}
	// The plan's limits are those of the version the tenant holds: a price
	// pinned to a version, else the tenant's grandfathered version, else
	// the current one (issue 25).
	v := int64(0)
	if in.tenant.PlanVersion != nil {
		v = *in.tenant.PlanVersion
	}
	if in.sub != nil && in.sub.StripePriceID != "" {
		pinned, err := catalogue.PinnedVersion(ctx, q, in.sub.StripePriceID, in.tenant.Plan)
		if err != nil {
			return err
		}
		if pinned > 0 {
			v = pinned
		}
	}
	if in.plan.Key != "" {
		if in.plan, err = catalogue.PlanAt(ctx, q, in.plan, v); err != nil {
			return err
		}
	}
	// Add-ons come from every live subscription, the plan's and the ones
	// billed on their own (issue 25).
	if err := s.readAddons(ctx, q, in); err != nil {
		return err
	}
	rows, err := q.Query(ctx, OverlappingSubscriptionsOf("$1"), in.tenant.ID)
	if err != nil {
		return fmt.Errorf("read overlapping subscriptions: %w", err)
	}
	if in.overlapping, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("read overlapping subscriptions: %w", err)
	}
	rows, err = q.Query(ctx, `
SELECT id, meter, extra, quota_limit, mode, notify, reason, expires_at FROM quota_overrides
 WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2)
 ORDER BY created_at, id`, in.tenant.ID, in.now)
	if err != nil {
		return fmt.Errorf("read quota overrides: %w", err)
	}
	var o override
	_, err = pgx.ForEachRow(rows, []any{&o.id, &o.meter, &o.extra, &o.quotaLimit, &o.mode, &o.notify, &o.reason, &o.expiresAt}, func() error {
		in.overrides = append(in.overrides, o)
		o = override{}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read quota overrides: %w", err)
	}
	return nil
}

// compute applies the status rules, the overrides and the period to the
// inputs. When why is not nil it records, at each decision, what decided
// it (Explain): the explanation and the enforced snapshot come from this
// one function, so they cannot drift apart.
func (s *Service) compute(in inputs, why *explainer) limiter.Snapshot {
	plan, status, own := s.effectivePlan(in, why)
	snap := limiter.Snapshot{
		TenantID: in.tenant.ID,
		Plan:     plan.Key,
		Status:   status,
		Version:  in.tenant.EntitlementVersion,
		Quotas:   map[string]limiter.Quota{},
	}
	if plan.Key != "" {
		snap.PlanVersion = plan.Version
	}
	if plan.Rate != nil {
		r := *plan.Rate
		snap.Rate = &r
		why.plan(PolicyRate, fmt.Sprintf("%s per second, burst %s", fmtFloat(r.PerSecond), numfmt.Int(r.Burst)), nil)
	}
	if plan.Concurrency != nil {
		snap.Concurrency = *plan.Concurrency
		why.plan(PolicyConcurrency, numfmt.Int(snap.Concurrency)+" requests at once", &snap.Concurrency)
	}
	// Windows are the plan's as they are: quota overrides, add-ons and
	// seats change a meter's period quota, never a window.
	snap.Windows = planWindows(plan.Windows, why)
	seats := int64(1)
	if own && in.sub != nil {
		seats = in.sub.Seats
	}
	for m, q := range plan.Quotas {
		l := q.Limit
		if q.PerSeat {
			why.plan(QuotaPolicy(m), numfmt.Int(l)+" per seat a period, "+q.Mode, &q.Limit)
			l = saturatingMul(l, seats)
			why.seats(m, in.sub, own, seats, q.Limit, l)
		} else {
			why.plan(QuotaPolicy(m), numfmt.Int(l)+" a period, "+q.Mode, &l)
		}
		snap.Quotas[m] = limiter.Quota{Limit: l, Mode: limiter.QuotaMode(q.Mode)}
		setNotify(&snap, m, q.Notify)
	}
	if !own {
		keepOwnLimits(&snap, in.plan, why)
	}
	features := append([]string(nil), plan.Features...)
	if own {
		// Stripe Entitlements features and add-ons come with the paid
		// subscription; a tenant sent back to the default plan loses them.
		features = append(features, in.tenant.StripeFeatures...)
		applyAddons(snap.Quotas, &features, in.addons, why)
	} else {
		why.lostAddons(in.addons)
	}
	applyOverrides(snap.Quotas, in.overrides, why)
	for _, o := range in.overrides { // the latest override's thresholds win
		if _, ok := snap.Quotas[o.meter]; ok && len(o.notify) > 0 {
			setNotify(&snap, o.meter, o.notify)
		}
	}
	snap.Features = uniqueSorted(features)

	var subPeriod *period.Period
	if in.sub != nil && in.sub.CurrentPeriodStart != nil && in.sub.CurrentPeriodEnd != nil {
		subPeriod = &period.Period{Start: *in.sub.CurrentPeriodStart, End: *in.sub.CurrentPeriodEnd}
	}
	// The window follows the tenant's own plan (not the fallback one), as
	// metering's period lookup does, so counters and durable meters agree.
	w := period.Window(in.plan.QuotaWindow)
	p := period.In(w, in.tenant.PeriodAnchor, subPeriod, in.now)
	snap.PeriodStart, snap.PeriodEnd = p.Start, p.End
	snap.NextPeriodEnd = period.In(w, in.tenant.PeriodAnchor, subPeriod, p.End).End
	// The window before, so that a limiter whose Redis clock is behind
	// this process's (the window has not begun there) decides in it
	// instead of resetting the quota early. Only when it ends where this
	// one starts: before a subscription's period the rules fall back to
	// the tenant's anchor months, which may not be the window the limiter
	// counted in (then the limiter goes by the snapshot as before).
	if prev := period.In(w, in.tenant.PeriodAnchor, subPeriod, p.Start.Add(-time.Second)); prev.End.Equal(p.Start) {
		snap.PrevPeriodStart = prev.Start
	}
	return snap
}

// effectivePlan applies the subscription status rules; own is true when the
// tenant gets its own plan. why learns the subscription and the plan basis.
func (s *Service) effectivePlan(in inputs, why *explainer) (plan catalogue.Plan, status string, own bool) {
	if in.sub == nil {
		why.ownPlan(in.plan)
		return in.plan, StatusActive, true
	}
	switch in.sub.Status {
	case StatusActive, StatusTrialing:
		why.subscription(in.sub, nil, "the tenant's plan applies")
		why.ownPlan(in.plan)
		return in.plan, in.sub.Status, true
	case StatusPastDue:
		var graceEnd *time.Time
		switch {
		case in.sub.GraceEndsAt != nil:
			graceEnd = in.sub.GraceEndsAt
		case in.sub.PastDueSince != nil:
			g := in.sub.PastDueSince.Add(s.opts.GracePeriod)
			graceEnd = &g
		}
		if graceEnd == nil || in.now.Before(*graceEnd) {
			why.subscription(in.sub, graceEnd, graceNote(graceEnd))
			why.ownPlan(in.plan)
			return in.plan, StatusPastDue, true
		}
		why.subscription(in.sub, graceEnd, "the grace period ended at "+fmtTime(*graceEnd)+": the default plan applies")
		why.fallback(s.fallback(in), in.plan.Key, "subscription "+in.sub.ID+" is past_due and its grace period ended at "+fmtTime(*graceEnd))
		return s.fallback(in), in.sub.Status, false
	}
	// unpaid, canceled, incomplete, incomplete_expired, paused, an expired
	// grace period, and statuses Stripe may add later: no paid access.
	why.subscription(in.sub, nil, "no paid access: the default plan applies")
	why.fallback(s.fallback(in), in.plan.Key, "subscription "+in.sub.ID+" is "+in.sub.Status+", which grants no paid access")
	return s.fallback(in), in.sub.Status, false
}

func (s *Service) fallback(in inputs) catalogue.Plan {
	if in.defaultPlan != nil {
		return *in.defaultPlan
	}
	// No default plan stored: refuse metered use (the default meter and
	// every meter of the tenant's own plan) rather than keep paid limits
	// for a tenant that stopped paying. (Version 0 tells Explain.)
	refused := map[string]catalogue.Quota{keyspace.DefaultMeter: {Limit: 0, Mode: string(limiter.ModeHard)}}
	for m := range in.plan.Quotas {
		refused[m] = catalogue.Quota{Limit: 0, Mode: string(limiter.ModeHard)}
	}
	return catalogue.Plan{Key: s.opts.DefaultPlan, Quotas: refused}
}

// keepOwnLimits runs after a fallback: a limit of the tenant's own plan that
// the default plan leaves unlimited (no rate, no concurrency, a meter it
// does not name) stays, at one seat. Otherwise a tenant whose subscription
// ended would get more than it had while paying: a paid plan's 50 exports
// would become unlimited on a default plan that never names exports.
func keepOwnLimits(snap *limiter.Snapshot, own catalogue.Plan, why *explainer) {
	if snap.Rate == nil && own.Rate != nil {
		r := *own.Rate
		snap.Rate = &r
		why.kept(PolicyRate, own, fmt.Sprintf("%s per second, burst %s", fmtFloat(r.PerSecond), numfmt.Int(r.Burst)), nil)
	}
	if snap.Concurrency == 0 && own.Concurrency != nil {
		snap.Concurrency = *own.Concurrency
		why.kept(PolicyConcurrency, own, numfmt.Int(snap.Concurrency)+" requests at once", &snap.Concurrency)
	}
	keepOwnWindows(snap, own, why)
	for _, m := range slices.Sorted(maps.Keys(own.Quotas)) {
		if _, ok := snap.Quotas[m]; ok {
			continue
		}
		q := own.Quotas[m]
		what := numfmt.Int(q.Limit) + " a period, " + q.Mode
		if q.PerSeat {
			what = numfmt.Int(q.Limit) + " per seat a period (one seat), " + q.Mode
		}
		snap.Quotas[m] = limiter.Quota{Limit: q.Limit, Mode: limiter.QuotaMode(q.Mode)}
		setNotify(snap, m, q.Notify)
		why.kept(QuotaPolicy(m), own, what, &q.Limit)
	}
}

// readAddons reads the add-on items of every live subscription of the
// tenant (active, trialing, or past_due within its grace period) with their
// grants. A subscription that ended, or whose grace ended, stops
// contributing.
//
// The current subscription's add-ons are read whatever its status, so that
// a fallback can say which add-ons it took away (Explain).
func (s *Service) readAddons(ctx context.Context, q postgres.Querier, in *inputs) error {
	currentID := ""
	if in.sub != nil {
		currentID = in.sub.ID
	}
	// The items are the tenant's; what their prices grant is the
	// catalogue's, read in the same transaction.
	type item struct {
		price, product, sub, status string
		qty                         int64
		graceEnd, pastDue           *time.Time
	}
	rows, err := q.Query(ctx, `
SELECT i.price_id, coalesce(i.product_id, ''), i.quantity, s.id, s.status, s.grace_ends_at, s.past_due_since
  FROM subscriptions s
  JOIN subscription_items i ON i.subscription_id = s.id
 WHERE s.tenant_id = $1 AND (s.status IN (`+liveStatuses+`) OR s.id = $2)
 ORDER BY s.id = $2 DESC, s.id, i.item_id`, in.tenant.ID, currentID)
	if err != nil {
		return fmt.Errorf("read add-ons: %w", err)
	}
	var (
		items []item
		it    item
	)
	if _, err := pgx.ForEachRow(rows, []any{&it.price, &it.product, &it.qty, &it.sub, &it.status, &it.graceEnd, &it.pastDue}, func() error {
		items = append(items, it)
		it = item{}
		return nil
	}); err != nil {
		return fmt.Errorf("read add-ons: %w", err)
	}
	mapped := make([]catalogue.Item, len(items))
	for i, it := range items {
		mapped[i] = catalogue.Item{Price: it.price, Product: it.product}
	}
	grants, err := catalogue.AddonsForItems(ctx, q, mapped)
	if err != nil {
		return err
	}
	for i, it := range items {
		g := grants[i]
		if g == nil {
			continue
		}
		if it.status == StatusPastDue && it.sub != currentID {
			end := it.graceEnd
			if end == nil && it.pastDue != nil {
				grace := it.pastDue.Add(s.opts.GracePeriod)
				end = &grace
			}
			if end != nil && !in.now.Before(*end) {
				continue
			}
		}
		in.addons = append(in.addons, addonItem{price: g.Price, name: g.Name, sub: it.sub, quotas: g.Quotas, features: g.Features, qty: it.qty})
		if in.sub != nil {
			in.sub.Addons = append(in.sub.Addons, SubscriptionAddon{StripePriceID: g.Price, Name: g.Name, Quantity: it.qty, SubscriptionID: it.sub})
		}
	}
	return nil
}

// applyAddons adds each add-on's extra units × its item's quantity to the
// meters the plan limits (a meter the plan leaves unlimited stays so), and
// its features.
func applyAddons(quotas map[string]limiter.Quota, features *[]string, items []addonItem, why *explainer) {
	for _, it := range items {
		for _, m := range slices.Sorted(maps.Keys(it.quotas)) {
			extra := it.quotas[m]
			q, ok := quotas[m]
			if ok {
				q.Limit = saturatingAdd(q.Limit, saturatingMul(extra, it.qty))
				quotas[m] = q
			}
			why.addon(m, it, extra, ok, q.Limit)
		}
		if it.qty > 0 {
			*features = append(*features, it.features...)
		}
	}
}

func saturatingMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// applyOverrides changes quotas in the order the overrides were created: a
// quota_limit replaces the limit, extra adds to it, mode replaces the mode.
// A meter the plan leaves unlimited stays unlimited unless an override sets
// a limit.
func applyOverrides(quotas map[string]limiter.Quota, os []override, why *explainer) {
	for _, o := range os {
		q, ok := quotas[o.meter]
		if o.quotaLimit != nil {
			q.Limit, ok = *o.quotaLimit, true
			if q.Mode == "" {
				q.Mode = limiter.ModeHard
			}
		}
		if !ok {
			why.override(o, false, q)
			continue
		}
		if o.extra != nil {
			q.Limit += *o.extra
		}
		if o.mode != nil {
			q.Mode = limiter.QuotaMode(*o.mode)
		}
		quotas[o.meter] = q
		why.override(o, true, q)
	}
}

// buildSnapshot computes the tenant's snapshot from what q sees.
func (s *Service) buildSnapshot(ctx context.Context, q postgres.Querier, tenantID string) (limiter.Snapshot, error) {
	in, err := loadInputs(ctx, q, tenantID)
	if err != nil {
		return limiter.Snapshot{}, err
	}
	if err := s.fill(ctx, q, &in); err != nil {
		return limiter.Snapshot{}, err
	}
	return s.compute(in, nil), nil
}

// The read and write paths of a snapshot, by name:
//
// Read (no new version):
//   - SnapshotFromPostgres computes it from the record and writes nothing:
//     for pages and jobs that must see what Postgres says now.
//   - ReloadSnapshot computes it from the record and writes the copy back to
//     Redis: the limiter's Loader, for a snapshot Redis lost.
//   - CachedSnapshot answers from Redis while the copy's period lasts, else
//     ReloadSnapshot: one Redis read in steady state, for the hot paths
//     (usage, metering's limits).
//
// Write (a new version, then published):
//   - BumpVersionTx bumps the version and records the snapshot inside the
//     caller's transaction; the caller publishes after its commit (with
//     publishRetried, here, or PublishToRedis).
//   - BumpAndPublish does both for data that is already committed (an
//     override expired, a grace period ended): its own transaction, then
//     the publish.
//   - WriteAndPublish (writes.go) runs another package's writes to tenants
//     in a transaction, bumps every tenant they changed, commits, publishes.
//   - PublishToRedis only writes a copy to Redis (no version); every writer
//     above ends with it.

// SnapshotFromPostgres computes the tenant's current snapshot from Postgres
// in a read-only transaction: no version bump, nothing written, Redis not
// asked. Use CachedSnapshot on a hot path.
func (s *Service) SnapshotFromPostgres(ctx context.Context, tenantID string) (limiter.Snapshot, error) {
	var snap limiter.Snapshot
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		snap, err = s.buildSnapshot(ctx, tx, tenantID)
		return err
	})
	if err != nil {
		return limiter.Snapshot{}, fmt.Errorf("entitlements: snapshot: %w", err)
	}
	return snap, nil
}

// BumpVersionTx bumps the tenant's entitlement version and records the new
// snapshot inside the caller's transaction, for a change made in that same
// transaction. The caller publishes the returned snapshot (PublishToRedis)
// after its commit, never before: the limiter must not see an uncommitted
// change.
func (s *Service) BumpVersionTx(ctx context.Context, tx pgx.Tx, tenantID, reason string) (limiter.Snapshot, error) {
	if !ids.IsUUID(tenantID) {
		return limiter.Snapshot{}, tenantNotFound(tenantID)
	}
	tag, err := tx.Exec(ctx, `UPDATE tenants SET entitlement_version = entitlement_version + 1, updated_at = now() WHERE id = $1`, tenantID)
	if err != nil {
		return limiter.Snapshot{}, fmt.Errorf("entitlements: bump version: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return limiter.Snapshot{}, tenantNotFound(tenantID)
	}
	var before limiter.Snapshot
	if s.opts.OnChange != nil {
		// The last recorded version is what the limiter was told before.
		var raw []byte
		err := tx.QueryRow(ctx, `SELECT snapshot FROM entitlement_versions WHERE tenant_id = $1 ORDER BY version DESC LIMIT 1`, tenantID).Scan(&raw)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return limiter.Snapshot{}, fmt.Errorf("entitlements: bump version: previous: %w", err)
		}
		if raw != nil {
			if err := json.Unmarshal(raw, &before); err != nil {
				return limiter.Snapshot{}, fmt.Errorf("entitlements: bump version: previous: %w", err)
			}
		}
	}
	snap, err := s.buildSnapshot(ctx, tx, tenantID)
	if err != nil {
		return limiter.Snapshot{}, fmt.Errorf("entitlements: bump version: %w", err)
	}
	if err := recordVersion(ctx, tx, snap, reason); err != nil {
		return limiter.Snapshot{}, fmt.Errorf("entitlements: bump version: %w", err)
	}
	if s.opts.OnChange != nil {
		if err := s.opts.OnChange(ctx, tx, Change{Before: before, After: snap, Reason: reason}); err != nil {
			return limiter.Snapshot{}, fmt.Errorf("entitlements: bump version: on change: %w", err)
		}
	}
	return snap, nil
}

func recordVersion(ctx context.Context, q postgres.Querier, snap limiter.Snapshot, reason string) error {
	raw, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	_, err = q.Exec(ctx, `INSERT INTO entitlement_versions (tenant_id, version, reason, snapshot) VALUES ($1, $2, $3, $4)`,
		snap.TenantID, snap.Version, reason, raw)
	if err != nil {
		return fmt.Errorf("record entitlement version: %w", err)
	}
	return nil
}

// BumpAndPublish bumps the version in its own transaction, then publishes
// the new snapshot: for changes whose data is already committed (a grace
// period that ended, an override that expired). A change still to be
// written belongs in the transaction of BumpVersionTx instead.
func (s *Service) BumpAndPublish(ctx context.Context, tenantID, reason string) (limiter.Snapshot, error) {
	var snap limiter.Snapshot
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		snap, err = s.BumpVersionTx(ctx, tx, tenantID, reason)
		return err
	})
	if err != nil {
		return limiter.Snapshot{}, fmt.Errorf("entitlements: refresh: %w", err)
	}
	s.publishRetried(ctx, snap)
	return snap, nil
}

// ReloadSnapshot is the limiter's Loader: the snapshot computed from
// Postgres (SnapshotFromPostgres), written back to Redis as a copy (no new
// version; a write-back that fails is logged, the snapshot still
// returned). An unknown tenant is both apperr NotFound and
// limiter.ErrUnknownTenant.
func (s *Service) ReloadSnapshot(ctx context.Context, tenantID string) (limiter.Snapshot, error) {
	snap, err := s.SnapshotFromPostgres(ctx, tenantID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return limiter.Snapshot{}, fmt.Errorf("%w: %w", limiter.ErrUnknownTenant, err)
	}
	if err != nil {
		return limiter.Snapshot{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, s.opts.RedisReadTimeout)
	defer cancel()
	if err := s.PublishToRedis(wctx, snap); err != nil {
		// The caller still gets a correct snapshot; Redis gets it next time.
		s.log.WarnContext(ctx, "writing loaded snapshot back failed", "tenant_id", tenantID, "err", err)
	}
	return snap, nil
}

// CachedSnapshot is the snapshot the limiter enforces: the copy in Redis
// while its period has not ended, else (missing, expired, or Redis down)
// ReloadSnapshot's. One Redis read in steady state; it may lag a commit by
// the publish's milliseconds, so a page that must show what was just
// written uses SnapshotFromPostgres.
func (s *Service) CachedSnapshot(ctx context.Context, tenantID string) (limiter.Snapshot, error) {
	if s.store != nil && ids.IsUUID(tenantID) {
		rctx, cancel := context.WithTimeout(ctx, s.opts.RedisReadTimeout)
		snap, ok, err := s.store.Snapshot(rctx, tenantID)
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "reading snapshot from redis failed", "tenant_id", tenantID, "err", err)
		}
		if ok && err == nil && s.opts.Now().Before(snap.PeriodEnd) {
			return snap, nil
		}
	}
	snap, err := s.ReloadSnapshot(ctx, tenantID)
	if err != nil {
		return limiter.Snapshot{}, err
	}
	return snap, nil
}
