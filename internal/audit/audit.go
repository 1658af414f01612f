// Package audit keeps the trail of admin actions: who (the name of the admin
// credential), when, through what (the API or the console), what, and the
// state of the subject (tenant, plan, add-on, service token or Stripe
// event) before and after. It owns the audit_log table. The HTTP layers
// wrap each admin action in Do; the services stay unaware of it. The
// subjects' states are read through their owners (Log.Read; the
// audit/readers package registers them at wiring).
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/ids"
)

// Actor is who acted: the admin credential's name and the way in.
type Actor struct {
	Name string
	Via  string // ViaAPI or ViaConsole
}

// Ways in.
const (
	ViaAPI     = "api"
	ViaConsole = "console"
)

type actorKey struct{}

// WithActor returns ctx carrying the actor.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the ctx's actor, if any.
func ActorFrom(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok && a.Name != ""
}

// Entry is one recorded action.
type Entry struct {
	ID       int64           `json:"id"`
	At       time.Time       `json:"at"`
	Actor    string          `json:"actor"`
	Via      string          `json:"via"`
	Action   string          `json:"action"`
	TenantID string          `json:"tenant_id,omitempty"`
	PlanKey  string          `json:"plan_key,omitempty"`
	Target   string          `json:"target,omitempty"`
	Before   json.RawMessage `json:"before"`
	After    json.RawMessage `json:"after"`
}

// Subject is what an action changes. Set what the request names; Do fills
// in the rest (the tenant of an API key or of a Stripe event).
type Subject struct {
	TenantID string
	PlanKey  string
	KeyID    string
	EventID  string
	// AddonPriceID is the Stripe price of an add-on grant.
	AddonPriceID string
	// ServiceTokenID is a service token's id (never its secret).
	ServiceTokenID string
	// Target names the object inside the subject (an override or key id).
	Target string
	// State, when set, reads the target's state as its owner shows it,
	// instead of the tenant's; nil when it does not exist. Unset, the
	// reader registered for the route's kind (Log.Read) is used.
	State func(ctx context.Context, target string) json.RawMessage

	kind, stateOf Kind // of the route (Route.Subject)
}

// Reader reads, for the audit trail, the subjects of one kind as the
// package that owns them shows them (billing's Stripe events,
// the catalogue's plans and add-ons, credits' grants and top-ups), so that
// neither the trail, the API nor the console knows whose tables they are
// in. A kind named by the entry's Target (a grant, a top-up) is read by
// it; the others by their own Subject field.
type Reader struct {
	// State is the object's state as its owner shows it; nil when it
	// does not exist.
	State func(ctx context.Context, id string) json.RawMessage
	// TenantOf is the tenant the object belongs to; "" when none. Nil for
	// a kind that belongs to no tenant.
	TenantOf func(ctx context.Context, id string) string
}

// own is the kind and id of the subject whose state an entry records, in
// the order state has always chosen: a Stripe event, a tenant, a plan, an
// add-on, a service token.
func (s Subject) own() (Kind, string) {
	switch {
	case s.EventID != "":
		return KindEvent, s.EventID
	case ids.IsUUID(s.TenantID):
		return KindTenant, s.TenantID
	case s.PlanKey != "":
		return KindPlan, s.PlanKey
	case s.AddonPriceID != "":
		return KindAddon, s.AddonPriceID
	case ids.IsUUID(s.ServiceTokenID):
		return KindServiceToken, s.ServiceTokenID
	}
	return 0, ""
}

// named says whether the subject names anything whose state can be read.
func (s Subject) named() bool {
	return s.TenantID != "" || s.PlanKey != "" || s.EventID != "" || s.AddonPriceID != "" || s.ServiceTokenID != ""
}

// Log records and lists entries.
type Log struct {
	db      *pgxpool.Pool
	log     *slog.Logger
	readers map[Kind]Reader
}

// Read registers how subjects of kind k are read. Call it while wiring,
// before the log is used.
func (l *Log) Read(k Kind, r Reader) {
	if l.readers == nil {
		l.readers = map[Kind]Reader{}
	}
	l.readers[k] = r
}

// New returns the audit log on db.
func New(db *pgxpool.Pool, log *slog.Logger) *Log {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Log{db: db, log: log}
}

// Do runs fn, an admin action on sub, and records it with the subject's
// state before and after. A failed fn records nothing. A failure to record
// is logged, not returned: the action has happened and saying otherwise
// would make the caller retry it.
func (l *Log) Do(ctx context.Context, action string, sub Subject, fn func() (Subject, error)) error {
	if l == nil {
		_, err := fn()
		return err
	}
	l.resolve(ctx, &sub)
	before := l.state(ctx, sub)
	got, err := fn()
	if err != nil {
		return err
	}
	// A create names its subject only once done.
	if !sub.named() {
		sub.TenantID, sub.PlanKey, sub.EventID = got.TenantID, got.PlanKey, got.EventID
		sub.AddonPriceID, sub.ServiceTokenID = got.AddonPriceID, got.ServiceTokenID
		l.resolve(ctx, &sub)
	}
	if sub.Target == "" {
		sub.Target = got.Target
	}
	after := l.state(ctx, sub)
	if err := l.Record(ctx, Entry{Action: action, TenantID: sub.TenantID, PlanKey: sub.PlanKey, Target: sub.Target, Before: before, After: after}); err != nil {
		l.log.ErrorContext(ctx, "audit entry not recorded", "action", action, "tenant_id", sub.TenantID, "plan", sub.PlanKey, "err", err)
	}
	return nil
}

// Record stores one entry; the actor comes from ctx ("unknown" without one).
func (l *Log) Record(ctx context.Context, e Entry) error {
	a, ok := ActorFrom(ctx)
	if !ok {
		a = Actor{Name: "unknown", Via: ViaAPI}
	}
	if a.Via != ViaConsole {
		a.Via = ViaAPI
	}
	var tid, plan, target *string
	if ids.IsUUID(e.TenantID) {
		tid = &e.TenantID
	}
	if e.PlanKey != "" {
		plan = &e.PlanKey
	}
	if e.Target != "" {
		target = &e.Target
	}
	_, err := l.db.Exec(ctx, `
		INSERT INTO audit_log (actor, via, action, tenant_id, plan_key, target, before, after)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, a.Name, a.Via, e.Action, tid, plan, target, nullJSON(e.Before), nullJSON(e.After))
	if err != nil {
		return fmt.Errorf("audit: record: %w", err)
	}
	return nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}

// Filter selects entries; empty fields match everything.
type Filter struct {
	TenantID string
	PlanKey  string
	Actor    string
	// BeforeID pages back: entries with a smaller id.
	BeforeID int64
	// Limit is 1-200; 0 = 50.
	Limit int
}

// List returns matching entries, newest first.
func (l *Log) List(ctx context.Context, f Filter) ([]Entry, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 200 {
		f.Limit = 200
	}
	if f.TenantID != "" && !ids.IsUUID(f.TenantID) {
		return nil, nil // no entry has such a tenant
	}
	var tid *string
	if f.TenantID != "" {
		tid = &f.TenantID
	}
	rows, err := l.db.Query(ctx, `
		SELECT id, at, actor, via, action, COALESCE(tenant_id::text, ''), COALESCE(plan_key, ''), COALESCE(target, ''),
		       COALESCE(before, 'null'::jsonb), COALESCE(after, 'null'::jsonb)
		FROM audit_log
		WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2 = '' OR plan_key = $2) AND ($3 = '' OR actor = $3)
		  AND ($4 = 0 OR id < $4)
		ORDER BY id DESC LIMIT $5`, tid, f.PlanKey, f.Actor, f.BeforeID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	var out []Entry
	var e Entry
	var before, after []byte
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.At, &e.Actor, &e.Via, &e.Action, &e.TenantID, &e.PlanKey, &e.Target, &before, &after}, func() error {
		e.Before, e.After = compactJSON(before), compactJSON(after)
		e.At = e.At.UTC()
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	return out, nil
}

// resolve finds the tenant of an API key, a Stripe event or an object of
// a registered kind, and that kind's state reader.
func (l *Log) resolve(ctx context.Context, sub *Subject) {
	if r, ok := l.readers[sub.stateOf]; ok && sub.State == nil && sub.stateOf.targeted() {
		sub.State = r.State
	}
	if sub.TenantID != "" {
		return
	}
	if r, ok := l.readers[sub.kind]; ok && r.TenantOf != nil && sub.Target != "" {
		sub.TenantID = r.TenantOf(ctx, sub.Target)
		return
	}
	var k Kind
	var id string
	switch {
	case sub.KeyID != "":
		k, id = KindKey, sub.KeyID
		if sub.Target == "" {
			sub.Target = sub.KeyID
		}
	case sub.EventID != "":
		k, id = KindEvent, sub.EventID
	default:
		return
	}
	if r, ok := l.readers[k]; ok && r.TenantOf != nil {
		sub.TenantID = r.TenantOf(ctx, id)
	}
}

// state is the subject as people compare it, as its owner shows it (the
// reader registered for its kind): a Stripe event's status, else a
// tenant's plan, overrides and keys, else a plan's limits, else an add-on's
// grant, else a service token's name and whether it is revoked. nil when
// the subject does not exist (yet, or any more).
func (l *Log) state(ctx context.Context, sub Subject) json.RawMessage {
	if sub.State != nil {
		return sub.State(ctx, sub.Target)
	}
	k, id := sub.own()
	if r, ok := l.readers[k]; ok && r.State != nil {
		return r.State(ctx, id)
	}
	// A kind whose owner registered no reader (Log.Read): nothing to
	// compare, the entry still says who did what.
	return nil
}

// compactJSON copies b without insignificant spaces (Postgres writes jsonb
// with them in its text form, not in its binary one).
func compactJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return append(json.RawMessage(nil), b...)
	}
	return buf.Bytes()
}

// Creators maps the targets of the tenant's entries of action (an override
// id for "override.create") to the actor who did it first, for pages that
// name who created what. An entry without a target is skipped; a nil Log
// knows nobody.
func (l *Log) Creators(ctx context.Context, tenantID, action string) (map[string]string, error) {
	out := map[string]string{}
	if l == nil || !ids.IsUUID(tenantID) {
		return out, nil
	}
	rows, err := l.db.Query(ctx, `
		SELECT DISTINCT ON (target) target, actor FROM audit_log
		WHERE tenant_id = $1 AND action = $2 AND target IS NOT NULL
		ORDER BY target, id`, tenantID, action)
	if err != nil {
		return nil, fmt.Errorf("audit: creators: %w", err)
	}
	var target, actor string
	_, err = pgx.ForEachRow(rows, []any{&target, &actor}, func() error {
		out[target] = actor
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: creators: %w", err)
	}
	return out, nil
}
