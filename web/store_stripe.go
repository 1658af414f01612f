package web

// The console's read model of Stripe: stored events and the resync's
// repairs.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// EventRow is a stored Stripe event.
type EventRow struct {
	ID            string
	Type          string
	CustomerID    string
	TenantID      string
	TenantName    string // "" when the event names no tenant (or it is gone)
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

// eventRows turns billing's events into rows, naming their tenants.
func (s *store) eventRows(ctx context.Context, evs []billing.Event) ([]EventRow, error) {
	var tids []string
	for _, e := range evs {
		if e.TenantID != nil {
			tids = append(tids, *e.TenantID)
		}
	}
	names, err := s.nameTenants(ctx, tids)
	if err != nil {
		return nil, err
	}
	out := make([]EventRow, 0, len(evs))
	for _, e := range evs {
		r := EventRow{ID: e.ID, Type: e.Type, CustomerID: deref(e.CustomerID), TenantID: deref(e.TenantID), Created: e.Created,
			ReceivedAt: e.ReceivedAt, Status: e.Status, IgnoredReason: deref(e.IgnoredReason), APIVersion: e.APIVersion,
			Attempts: e.Attempts, LastError: deref(e.LastError), ProcessedAt: e.ProcessedAt}
		r.TenantName = names[r.TenantID]
		out = append(out, r)
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// events lists a tenant's last events, newest first.
func (s *store) events(ctx context.Context, tenantID string, limit int) ([]EventRow, error) {
	p, err := s.bill.ListEvents(ctx, billing.EventQuery{TenantID: tenantID, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	return s.eventRows(ctx, p.Events)
}

// eventFilter selects the console's events list; empty fields match all.
type eventFilter struct {
	Status   string // pending, processed, ignored or failed
	ID       string // an event id (evt_…), exactly
	Customer string // a Stripe customer id (cus_…), exactly
}

func (f eventFilter) query() billing.EventQuery {
	return billing.EventQuery{Status: f.Status, ID: f.ID, Customer: f.Customer}
}

// eventPage lists the events that match f, newest first, after the page
// cursor cur ("" = the first page), and the cursor of the next page ("" =
// none).
func (s *store) eventPage(ctx context.Context, f eventFilter, cur string, limit int) ([]EventRow, string, error) {
	q := f.query()
	q.Cursor, q.Limit = cur, limit
	p, err := s.bill.ListEvents(ctx, q)
	if err != nil {
		return nil, "", fmt.Errorf("web: events: %w", err)
	}
	out, err := s.eventRows(ctx, p.Events)
	return out, p.NextCursor, err
}

// failedIDs are the ids of failed events that match f, newest first, at
// most limit, and how many match in all.
func (s *store) failedIDs(ctx context.Context, f eventFilter, limit int) ([]string, int64, error) {
	out, total, err := s.bill.FailedEvents(ctx, f.query(), limit)
	if err != nil {
		return nil, 0, fmt.Errorf("web: failed events: %w", err)
	}
	return out, total, nil
}

// failedAmong keeps the ids of events that are failed, newest first.
func (s *store) failedAmong(ctx context.Context, ids []string) ([]string, error) {
	out, err := s.bill.FailedAmong(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("web: failed events: %w", err)
	}
	return out, nil
}

func (s *store) event(ctx context.Context, id string) (EventRow, error) {
	e, err := s.bill.GetEvent(ctx, id)
	if err != nil {
		return EventRow{}, fmt.Errorf("web: event: %w", err)
	}
	rows, err := s.eventRows(ctx, []billing.Event{e})
	if err != nil {
		return EventRow{}, err
	}
	r := rows[0]
	var pretty bytes.Buffer
	if json.Indent(&pretty, e.Payload, "", "    ") == nil {
		r.Payload = pretty.String()
	} else {
		r.Payload = string(e.Payload)
	}
	return r, nil
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
	ds, err := s.bill.ListDrift(ctx, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("web: drift: %w", err)
	}
	tids := make([]string, 0, len(ds))
	for _, d := range ds {
		tids = append(tids, d.TenantID)
	}
	names, err := s.nameTenants(ctx, tids)
	if err != nil {
		return nil, err
	}
	out := make([]DriftRow, 0, len(ds))
	for _, d := range ds {
		out = append(out, DriftRow{ID: d.ID, TenantID: d.TenantID, TenantName: names[d.TenantID], SubscriptionID: d.SubscriptionID,
			Field: d.Field, Ours: deref(d.Ours), Stripe: deref(d.Stripe), RepairedAt: d.RepairedAt})
	}
	return out, nil
}

// OtherSubRow is a subscription of the tenant besides the current one: an
// overlapping plan subscription (a re-subscribe beside the old one, which
// grants its add-ons, never the plan) or one that bills add-ons on its own.
type OtherSubRow = entitlements.OtherSubscription

// otherSubscriptions lists the tenant's subscriptions other than the
// current one, live ones first.
func (s *store) otherSubscriptions(ctx context.Context, tenantID string) ([]OtherSubRow, error) {
	subs, err := s.ents.OtherSubscriptions(ctx, tenantID, 20)
	if err != nil {
		return nil, fmt.Errorf("web: other subscriptions: %w", err)
	}
	out := make([]OtherSubRow, 0, len(subs))
	for _, r := range subs {
		out = append(out, OtherSubRow(r))
	}
	return out, nil
}
