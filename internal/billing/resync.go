package billing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/jobs"
)

// DriftRepair is one difference from Stripe that resync repaired.
type DriftRepair struct {
	ID             int64     `json:"id"`
	TenantID       string    `json:"tenant_id"`
	SubscriptionID string    `json:"subscription_id,omitempty"`
	Field          string    `json:"field"`
	Ours           *string   `json:"ours"`
	Stripe         *string   `json:"stripe"`
	RepairedAt     time.Time `json:"repaired_at"`
}

// stripeState is what resync read from Stripe for one customer.
type stripeState struct {
	subs     []*stripe.Subscription
	features []string
	at       time.Time
}

// ResyncTenant re-reads the tenant's Stripe customer (subscriptions and
// active entitlements), repairs what differs here and returns the repairs.
func (s *Service) ResyncTenant(ctx context.Context, tenantID string) ([]DriftRepair, error) {
	if s.stripe == nil {
		return nil, apperr.New(apperr.Unavailable, "Stripe is not configured: STRIPE_SECRET_KEY is empty")
	}
	if !ids.IsUUID(tenantID) {
		return nil, apperr.New(apperr.NotFound, "no tenant %q", tenantID)
	}
	tenant, err := s.ents.GetTenantRow(ctx, tenantID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return nil, apperr.New(apperr.NotFound, "no tenant %q", tenantID)
	}
	if err != nil {
		return nil, fmt.Errorf("billing: load tenant: %w", err)
	}
	customer := &tenant.StripeCustomerID
	if *customer == "" {
		return nil, apperr.New(apperr.Conflict, "tenant %s has no Stripe customer to resync with", tenantID)
	}
	st, err := s.fetchCustomer(ctx, *customer)
	if err != nil {
		return nil, err
	}
	return s.repair(ctx, tenantID, *customer, st)
}

func (s *Service) fetchCustomer(ctx context.Context, customer string) (stripeState, error) {
	// Whole seconds, as Stripe's event times: an event of the same second
	// may be newer than what was read, so it is not made stale.
	st := stripeState{at: s.opts.Now().Truncate(time.Second)}
	cctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.SubscriptionListParams{Customer: stripe.String(customer), Status: stripe.String("all")}
	params.Context = cctx
	params.Limit = stripe.Int64(100)
	it := s.stripe.Subscriptions.List(params)
	for it.Next() {
		st.subs = append(st.subs, it.Subscription())
	}
	if err := it.Err(); err != nil {
		return st, stripeError("list the customer's subscriptions", err)
	}
	keys, err := s.listFeatures(ctx, customer)
	if err != nil {
		return st, stripeError("list the customer's entitlements", err)
	}
	st.features = keys
	return st, nil
}

func strp(s string) *string { return &s }

func timeStr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	return strp(t.UTC().Format(time.RFC3339))
}

// viewOf is a subscription read through stripe-go (at the pinned version)
// as billing reads any subscription.
func viewOf(ss *stripe.Subscription) subView {
	v := subView{ID: ss.ID, Status: string(ss.Status), Metadata: ss.Metadata, CancelAtPeriodEnd: ss.CancelAtPeriodEnd,
		TrialEnd: ss.TrialEnd, CanceledAt: ss.CanceledAt, PeriodStart: ss.CurrentPeriodStart, PeriodEnd: ss.CurrentPeriodEnd,
		StartDate: ss.StartDate, Created: ss.Created, BillingCycleAnchor: ss.BillingCycleAnchor}
	if ss.Customer != nil {
		v.Customer = ss.Customer.ID
	}
	if ss.LatestInvoice != nil {
		v.LatestInvoice = ss.LatestInvoice.ID
	}
	if ss.PauseCollection != nil {
		v.PauseCollection = string(ss.PauseCollection.Behavior)
	}
	if ss.Items != nil {
		for _, it := range ss.Items.Data {
			if it == nil {
				continue
			}
			iv := itemView{ID: it.ID, Quantity: it.Quantity}
			if it.Price != nil {
				iv.PriceID = it.Price.ID
				if it.Price.Product != nil {
					iv.ProductID = it.Price.Product.ID
				}
			}
			v.Items = append(v.Items, iv)
		}
	}
	return v
}

func (s *Service) repair(ctx context.Context, tenantID, customer string, st stripeState) ([]DriftRepair, error) {
	var repairs []DriftRepair
	_, err := s.ents.WriteAndPublish(ctx, func(ctx context.Context, w *entitlements.Writes) error {
		tx := w.Tx()
		repairs = nil
		if err := lockCustomer(ctx, tx, customer); err != nil {
			return err
		}
		note := func(sub, field string, ours, theirs *string) {
			repairs = append(repairs, DriftRepair{TenantID: tenantID, SubscriptionID: sub, Field: field, Ours: ours, Stripe: theirs})
		}
		for _, raw := range st.subs {
			if raw == nil || raw.ID == "" {
				continue
			}
			ss := viewOf(raw)
			cur, err := loadSub(ctx, w, ss.ID)
			if err != nil {
				return err
			}
			next := subRow{StoredSubscription: entitlements.StoredSubscription{TenantID: tenantID, PlanQuantity: 1}}
			if cur != nil {
				next = *cur
			} else {
				note(ss.ID, "subscription", nil, strp(ss.ID))
			}
			status := ss.Status
			if cur == nil || cur.Status != status {
				if cur != nil {
					note(ss.ID, "status", strp(cur.Status), strp(status))
				}
				next.Status = status
			}
			its, _, err := planItems(ctx, w, ss.Items)
			if err != nil {
				return err
			}
			priceID, itemID := "", ""
			if len(its) == 1 {
				priceID, itemID = its[0].PriceID, its[0].ID
				next.PlanQuantity = its[0].Quantity
			}
			if cur != nil && (cur.PriceID == nil) != (priceID == "") || cur != nil && cur.PriceID != nil && *cur.PriceID != priceID {
				note(ss.ID, "price", cur.PriceID, nullable(priceID))
			}
			next.PriceID, next.ItemID = nullable(priceID), nullable(itemID)
			next.HasPlanItem = priceID != ""
			if ss.StartDate > 0 {
				next.StartDate = unixPtr(ss.StartDate)
			}
			if ss.Created > 0 {
				next.StripeCreated = unixPtr(ss.Created)
			}
			next.Items = ss.Items
			if next.Items == nil {
				next.Items = []itemView{}
			}
			// A period Stripe gives as empty (stripe-mock's placeholders) is
			// not evidence of anything.
			if ps0, pe0 := ss.period(itemID); pe0 > ps0 && ps0 > 0 {
				ps, pe := unixPtr(ps0), unixPtr(pe0)
				if cur != nil && (!sameTime(cur.PeriodStart, ps) || !sameTime(cur.PeriodEnd, pe)) {
					note(ss.ID, "current_period", strp(strings.Join([]string{deref(timeStr(cur.PeriodStart)), deref(timeStr(cur.PeriodEnd))}, "/")),
						strp(strings.Join([]string{*timeStr(ps), *timeStr(pe)}, "/")))
				}
				next.PeriodStart, next.PeriodEnd = ps, pe
			}
			if cur != nil && cur.CancelAtPeriodEnd != ss.CancelAtPeriodEnd {
				note(ss.ID, "cancel_at_period_end", strp(fmt.Sprint(cur.CancelAtPeriodEnd)), strp(fmt.Sprint(ss.CancelAtPeriodEnd)))
			}
			next.CancelAtPeriodEnd = ss.CancelAtPeriodEnd
			if ss.LatestInvoice != "" {
				next.LatestInvoiceID = nullable(ss.LatestInvoice)
			}
			next.PauseCollection = nullable(ss.PauseCollection)
			s.setGrace(&next)
			if terminal(next.Status) && next.CanceledAt == nil {
				next.CanceledAt = unixPtr(ss.CanceledAt)
			}
			// Stripe as read now is newer than any event created before.
			at := st.at
			if next.LastEventAt == nil || next.LastEventAt.Before(at) {
				next.LastEventAt = &at
			}
			if err := saveSub(ctx, w, ss.ID, customer, &next); err != nil {
				return err
			}
		}
		// The plan is the current subscription's, chosen from all of them
		// as the event path chooses it (the view current_subscriptions).
		ours, err := w.Plan(ctx, tenantID)
		if err != nil {
			return err
		}
		if err := s.recomputePlan(ctx, w, tenantID); err != nil {
			return err
		}
		if now, err := w.Plan(ctx, tenantID); err != nil {
			return err
		} else if now != ours {
			var currentSub string
			_ = tx.QueryRow(ctx, `SELECT id FROM current_subscriptions s WHERE s.tenant_id = $1`, tenantID).Scan(&currentSub)
			note(currentSub, "plan", strp(ours), strp(now))
		}
		features, err := w.StripeFeatures(ctx, tenantID)
		if err != nil {
			return err
		}
		if strings.Join(normalizeKeys(features), ",") != strings.Join(st.features, ",") {
			note("", "features", strp(strings.Join(normalizeKeys(features), ",")), strp(strings.Join(st.features, ",")))
			if _, err := w.SetStripeFeatures(ctx, tenantID, st.features); err != nil {
				return err
			}
		}
		if len(repairs) == 0 {
			return nil
		}
		for i := range repairs {
			r := &repairs[i]
			err := tx.QueryRow(ctx, `INSERT INTO drift_repairs (tenant_id, subscription_id, field, ours, stripe)
				VALUES ($1, $2, $3, $4, $5) RETURNING id, repaired_at`,
				r.TenantID, nullable(r.SubscriptionID), r.Field, r.Ours, r.Stripe).Scan(&r.ID, &r.RepairedAt)
			if err != nil {
				return fmt.Errorf("billing: record repair: %w", err)
			}
		}
		w.Reason(fmt.Sprintf("stripe resync: %d repairs", len(repairs)))
		w.Changed(tenantID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(repairs) > 0 {
		for _, r := range repairs {
			s.m.drift.WithLabelValues(r.Field).Inc()
		}
		s.log.InfoContext(ctx, "stripe drift repaired", "tenant_id", tenantID, "repairs", len(repairs))
	}
	if repairs == nil {
		repairs = []DriftRepair{}
	}
	return repairs, nil
}

func normalizeKeys(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ListDrift lists repairs, newest first; tenantID "" lists all tenants.
func (s *Service) ListDrift(ctx context.Context, tenantID string, limit int) ([]DriftRepair, error) {
	if limit == 0 {
		limit = 50
	}
	if limit < 1 || limit > 200 {
		return nil, apperr.Invalidf("limit", "must be 1-200")
	}
	if tenantID != "" && !ids.IsUUID(tenantID) {
		return nil, apperr.Invalidf("tenant_id", "must be a tenant id (UUID)")
	}
	rows, err := s.db.Query(ctx, `
		SELECT id, COALESCE(tenant_id::text, ''), COALESCE(subscription_id, ''), field, ours, stripe, repaired_at
		FROM drift_repairs WHERE ($1::uuid IS NULL OR tenant_id = $1::uuid)
		ORDER BY repaired_at DESC, id DESC LIMIT $2`, nullable(tenantID), limit)
	if err != nil {
		return nil, fmt.Errorf("billing: list drift: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DriftRepair, error) {
		var d DriftRepair
		err := r.Scan(&d.ID, &d.TenantID, &d.SubscriptionID, &d.Field, &d.Ours, &d.Stripe, &d.RepairedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("billing: list drift: %w", err)
	}
	if out == nil {
		out = []DriftRepair{}
	}
	return out, nil
}

// ResyncArgs resyncs every tenant linked to a Stripe customer.
type ResyncArgs struct{}

// Kind names the job in River's table.
func (ResyncArgs) Kind() string { return "stripe_resync" }

// InsertOpts keeps resync on the Stripe queue.
func (ResyncArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueStripe, MaxAttempts: 3}
}

// ResyncWorker works ResyncArgs.
type ResyncWorker struct {
	river.WorkerDefaults[ResyncArgs]
	S *Service
}

// Timeout: a sweep over many customers takes longer than River's default.
func (w *ResyncWorker) Timeout(*river.Job[ResyncArgs]) time.Duration { return 10 * time.Minute }

// Work resyncs each linked tenant; one tenant's failure does not stop the rest.
func (w *ResyncWorker) Work(ctx context.Context, _ *river.Job[ResyncArgs]) error {
	if w.S.stripe == nil {
		return nil
	}
	ids, err := w.S.ents.LinkedTenants(ctx)
	if err != nil {
		return fmt.Errorf("billing: %w", err)
	}
	failed := 0
	for _, id := range ids {
		if _, err := w.S.ResyncTenant(ctx, id); err != nil {
			failed++
			w.S.log.WarnContext(ctx, "stripe resync of tenant failed", "tenant_id", id, "err", err)
		}
	}
	if failed > 0 {
		w.S.log.WarnContext(ctx, "stripe resync finished with failures", "tenants", len(ids), "failed", failed)
	}
	return nil
}

// GraceArgs refreshes tenants whose past_due grace period just ended, so
// that the limiter moves them to the default plan without waiting for any
// other change.
type GraceArgs struct{}

// Kind names the job in River's table.
func (GraceArgs) Kind() string { return "stripe_grace_expiry" }

// GraceWorker works GraceArgs.
type GraceWorker struct {
	river.WorkerDefaults[GraceArgs]
	S *Service
}

// Work refreshes each tenant with an ended grace period that has had no new
// entitlement version since it ended (so each ending is refreshed once).
func (w *GraceWorker) Work(ctx context.Context, _ *river.Job[GraceArgs]) error {
	_, err := w.S.ExpireGrace(ctx)
	return err
}

// ExpireGrace is GraceWorker's work; it returns the tenants refreshed.
func (s *Service) ExpireGrace(ctx context.Context) ([]string, error) {
	ids, err := s.ents.TenantsPastGrace(ctx, s.opts.Now())
	if err != nil {
		return nil, fmt.Errorf("billing: %w", err)
	}
	for _, id := range ids {
		if _, err := s.ents.BumpAndPublish(ctx, id, "stripe: past_due grace period ended"); err != nil {
			return nil, fmt.Errorf("billing: refresh after grace: %w", err)
		}
	}
	return ids, nil
}

// Workers registers billing's workers.
func (s *Service) Workers(w *river.Workers) {
	river.AddWorker(w, &EventWorker{S: s})
	river.AddWorker(w, &ResyncWorker{S: s})
	river.AddWorker(w, &GraceWorker{S: s})
}

// Periodic is billing's periodic jobs: grace expiry every 30 s, resync
// every 15 minutes.
func (s *Service) Periodic() []*river.PeriodicJob {
	return []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(30*time.Second),
			func() (river.JobArgs, *river.InsertOpts) { return GraceArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "stripe_grace_expiry"}),
		river.NewPeriodicJob(river.PeriodicInterval(15*time.Minute),
			func() (river.JobArgs, *river.InsertOpts) { return ResyncArgs{}, nil },
			&river.PeriodicJobOpts{ID: "stripe_resync"}),
	}
}
