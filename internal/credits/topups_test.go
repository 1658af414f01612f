package credits_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

func (b bundle) purchase(t *testing.T, p credits.Purchase) credits.PurchaseResult {
	t.Helper()
	var res credits.PurchaseResult
	err := pgx.BeginFunc(context.Background(), b.db, func(tx pgx.Tx) error {
		var err error
		res, err = b.svc.GrantPurchaseTx(context.Background(), tx, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (b bundle) topupGrants(t *testing.T, tenant string) []credits.Grant {
	t.Helper()
	l, err := b.svc.List(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	var out []credits.Grant
	for _, g := range l {
		if g.Source == credits.SourceTopup {
			out = append(out, g)
		}
	}
	return out
}

// A purchase is granted once, quantity × amount, expiring expires_in after
// it was paid, whichever of its events (the session, its invoice) comes
// first and however often each is replayed, also when they are processed
// at the same moment; a purchase of no mapped price records nothing, so
// mapping the price and replaying grants it.
func TestPurchaseIsGrantedOnceAcrossItsEvents(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tn := b.tenant(t)
	price := unique("price")
	if _, created, err := b.svc.PutTopup(ctx, price, credits.TopupInput{Meter: "requests", Amount: ptr(int64(1000)), ExpiresIn: ptr("720h")}); err != nil || !created {
		t.Fatalf("put top-up: %v, created %v", err, created)
	}
	paid := b.clock.Now().Add(-time.Minute).Truncate(time.Second)
	line := []credits.PurchaseLine{{PriceID: price, Quantity: 3}}
	session := credits.Purchase{TenantID: tn, Keys: []string{"cs_1", "in_1", "pi_1"}, Lines: line, At: paid}
	invoice := credits.Purchase{TenantID: tn, Keys: []string{"in_1", "pi_1"}, Lines: line, At: paid}
	r := b.purchase(t, session)
	if len(r.Grants) != 1 || r.Already {
		t.Fatalf("session: %+v", r)
	}
	g := r.Grants[0]
	if g.Amount != 3000 || g.Source != credits.SourceTopup || g.ExpiresAt == nil || !g.ExpiresAt.Equal(paid.Add(720*time.Hour)) || !g.EffectiveAt.Equal(paid) {
		t.Fatalf("grant: %+v", g)
	}
	for _, p := range []credits.Purchase{invoice, session, invoice} {
		if r := b.purchase(t, p); len(r.Grants) != 0 || !r.Already {
			t.Fatalf("again %v: %+v", p.Keys, r)
		}
	}
	// Invoice first, then its session (which names it), replays mixed in,
	// all at once.
	inv2 := credits.Purchase{TenantID: tn, Keys: []string{"in_2"}, Lines: line, At: paid}
	cs2 := credits.Purchase{TenantID: tn, Keys: []string{"cs_2", "in_2"}, Lines: line, At: paid}
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := inv2
			if i%2 == 1 {
				p = cs2
			}
			r := b.purchase(t, p)
			mu.Lock()
			made += len(r.Grants)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if made != 1 {
		t.Fatalf("concurrent events of one purchase made %d grants", made)
	}
	// The same payment intent links a session and an invoice that do not
	// name each other.
	b.purchase(t, credits.Purchase{TenantID: tn, Keys: []string{"cs_3", "pi_3"}, Lines: line, At: paid})
	if r := b.purchase(t, credits.Purchase{TenantID: tn, Keys: []string{"in_3", "pi_3"}, Lines: line, At: paid}); !r.Already {
		t.Fatalf("same payment intent: %+v", r)
	}
	if n := len(b.topupGrants(t, tn)); n != 3 {
		t.Fatalf("%d top-up grants, want 3", n)
	}

	// A price not mapped: nothing granted, nothing recorded.
	other := unique("price")
	p4 := credits.Purchase{TenantID: tn, Keys: []string{"cs_4"}, Lines: []credits.PurchaseLine{{PriceID: other, Quantity: 2}}, At: paid}
	if r := b.purchase(t, p4); len(r.Grants) != 0 || r.Already || fmt.Sprint(r.Unmapped) != fmt.Sprint([]string{other}) {
		t.Fatalf("unmapped: %+v", r)
	}
	if _, _, err := b.svc.PutTopup(ctx, other, credits.TopupInput{Meter: "exports", Amount: ptr(int64(5))}); err != nil {
		t.Fatal(err)
	}
	r = b.purchase(t, p4)
	if len(r.Grants) != 1 || r.Grants[0].Amount != 10 || r.Grants[0].Meter != "exports" || r.Grants[0].ExpiresAt != nil {
		t.Fatalf("after mapping: %+v", r)
	}
}

// The mapping's fields are validated, each named; a meter no plan defines
// is refused; a replaced mapping is not created; delete removes it.
func TestTopupMappings(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.tenant(t)
	bad := []struct {
		price string
		in    credits.TopupInput
		field string
	}{
		{"", credits.TopupInput{Meter: "requests", Amount: ptr(int64(1))}, "price_id"},
		{"price x", credits.TopupInput{Meter: "requests", Amount: ptr(int64(1))}, "price_id"},
		{"price_a", credits.TopupInput{Meter: "Bad", Amount: ptr(int64(1))}, "meter"},
		{"price_a", credits.TopupInput{Meter: "requests"}, "amount"},
		{"price_a", credits.TopupInput{Meter: "requests", Amount: ptr(int64(0))}, "amount"},
		{"price_a", credits.TopupInput{Meter: "requests", Amount: ptr(int64(1)), ExpiresIn: ptr("a month")}, "expires_in"},
		{"price_a", credits.TopupInput{Meter: "requests", Amount: ptr(int64(1)), ExpiresIn: ptr("-1h")}, "expires_in"},
		{"price_a", credits.TopupInput{Meter: "requests", Amount: ptr(int64(1)), ExpiresIn: ptr("100000h")}, "expires_in"},
		{"price_a", credits.TopupInput{Meter: "requests", Amount: ptr(int64(1)), Priority: ptr(101)}, "priority"},
	}
	for _, c := range bad {
		_, _, err := b.svc.PutTopup(ctx, c.price, c.in)
		e, ok := apperr.As(err)
		if !ok || e.Code != apperr.Invalid || len(e.Fields) == 0 || e.Fields[0].Field != c.field {
			t.Errorf("%q %+v: %v, want 400 naming %s", c.price, c.in, err, c.field)
		}
	}
	if _, _, err := b.svc.PutTopup(ctx, "price_a", credits.TopupInput{Meter: "nobody_has_it", Amount: ptr(int64(1))}); apperr.CodeOf(err) != apperr.Unprocessable {
		t.Fatalf("unknown meter: %v", err)
	}
	price := unique("price")
	if _, created, err := b.svc.PutTopup(ctx, price, credits.TopupInput{Meter: "requests", Amount: ptr(int64(1))}); err != nil || !created {
		t.Fatal(err, created)
	}
	tp, created, err := b.svc.PutTopup(ctx, price, credits.TopupInput{Meter: "requests", Amount: ptr(int64(7)), ExpiresIn: ptr("24h"), Priority: ptr(3)})
	if err != nil || created || tp.Amount != 7 || tp.ExpiresIn == nil || *tp.ExpiresIn != "24h0m0s" || tp.Priority != 3 {
		t.Fatalf("replaced: %+v %v %v", tp, created, err)
	}
	if err := b.svc.DeleteTopup(ctx, price); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.DeleteTopup(ctx, price); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("deleted twice: %v", err)
	}
}

// CanGrow: a grant of the meter says yes (a meter of its own: other tests
// map top-ups of "requests", which count for every tenant). The answer
// is kept for a moment (a refusal a client repeats costs Postgres one query
// per tenant and meter every two seconds, not one each): a grant another
// process made is seen within seconds, one this process changes at once.
func TestCanGrow(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	meter, key := strings.ReplaceAll(unique("grow"), "-", "_"), unique("plan")
	limit := int64(10)
	if _, err := b.cat.CreatePlan(ctx, catalogue.PlanInput{Key: key, Name: key, Quotas: map[string]*catalogue.QuotaInput{
		meter: {Limit: &limit, Mode: "hard"}}}); err != nil {
		t.Fatal(err)
	}
	tn, err := b.ents.CreateTenant(ctx, entitlements.TenantInput{Name: unique("tenant"), Plan: key})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.svc.CanGrow(ctx, tn.ID, meter); err != nil || ok {
		t.Fatalf("no grant, no top-up: %v %v", ok, err)
	}
	other := credits.NewService(b.db, b.ents, b.cat, nil, credits.Options{}) // another api process
	n := int64(5)
	g, err := other.Create(ctx, tn.ID, credits.GrantInput{Meter: meter, Amount: &n})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.svc.CanGrow(ctx, tn.ID, meter); ok {
		t.Fatal("the no was not kept for a moment")
	}
	testkit.Eventually(t, 10*time.Second, "the other process's grant seen", func() bool {
		ok, err := b.svc.CanGrow(ctx, tn.ID, meter)
		return err == nil && ok
	})
	if _, err := b.svc.Void(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.svc.CanGrow(ctx, tn.ID, meter); ok {
		t.Fatal("this process's void was not seen at once")
	}
	if ok, _ := b.svc.CanGrow(ctx, "not-a-uuid", meter); ok {
		t.Fatal("a malformed tenant id")
	}
}
