package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/stripemock"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// creditPlan is a plan with two soft quotas reported to Stripe meters
// (tokens and images) and a plan price, all names of its own.
type creditPlan struct {
	key, price         string
	tokEvent, imgEvent string
	tokPrice, imgPrice string
	tokMeter, imgMeter string
	tokLimit, imgLimit int64
	customer, tenant   string
}

func (e *env) creditPlan(f *fakeStripe) creditPlan {
	e.t.Helper()
	n := newCustomer()[5:]
	p := creditPlan{key: "metered" + n, price: "price_plan_" + n, tokEvent: "tg_tokens_" + n, imgEvent: "tg_images_" + n,
		tokPrice: "price_tok_" + n, imgPrice: "price_img_" + n, tokMeter: "mtr_tok_" + n, imgMeter: "mtr_img_" + n,
		tokLimit: 100, imgLimit: 10}
	in := catalogue.PlanInput{Key: p.key, Name: p.key, StripePriceIDs: []string{p.price}, Quotas: map[string]*catalogue.QuotaInput{
		"tokens": {Limit: &p.tokLimit, Mode: "soft", StripeMeterEvent: p.tokEvent},
		"images": {Limit: &p.imgLimit, Mode: "soft", StripeMeterEvent: p.imgEvent}}}
	if _, err := e.cat.CreatePlan(context.Background(), in); err != nil {
		e.t.Fatal(err)
	}
	if f != nil {
		// 2.5 cents a token; 1 dollar for 10 images (10 cents an image).
		f.setMeteredPrice(p.tokPrice, "usd", "2.5", 1, p.tokMeter, p.tokEvent)
		f.setMeteredPrice(p.imgPrice, "usd", "100", 10, p.imgMeter, p.imgEvent)
	}
	p.customer = newCustomer()
	p.tenant = e.tenant(p.key, p.customer)
	return p
}

var creditSeq int

func newCreditGrantID() string {
	creditSeq++
	return fmt.Sprintf("credgr_test_%d%d", time.Now().UnixNano(), creditSeq)
}

// creditEvent is a signed-ready billing.credit_grant.* event in the shape
// of Stripe's spec fixture (testdata/stripe/events/spec), for credit grant
// id of customer, worth value cents; mutate edits data.object further.
func creditEvent(t *testing.T, typ, id, customer string, value int64, updated time.Time, mutate func(o map[string]any)) []byte {
	t.Helper()
	return fixtureFile(t, "spec/billing.credit_grant.created.json", typ, func(o map[string]any) {
		o["id"], o["customer"], o["updated"] = id, customer, updated.Unix()
		o["amount"].(map[string]any)["monetary"].(map[string]any)["value"] = value
		if mutate != nil {
			mutate(o)
		}
	})
}

// fixtureFile is fixture with the event's type set.
func fixtureFile(t *testing.T, name, typ string, mutate func(o map[string]any)) []byte {
	t.Helper()
	b := fixture(t, name, newEventID(t), time.Now(), mutate)
	var ev map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	ev["type"] = typ
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func scopePrices(ids ...string) func(o map[string]any) {
	return func(o map[string]any) {
		ps := []any{}
		for _, id := range ids {
			ps = append(ps, map[string]any{"id": id})
		}
		o["applicability_config"] = map[string]any{"scope": map[string]any{"prices": ps}}
	}
}

func (e *env) stripeCredits(tenant string) []credits.Grant {
	e.t.Helper()
	l, err := e.creds.List(context.Background(), tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []credits.Grant
	for _, g := range l {
		if g.Source == credits.SourceStripeCredit {
			out = append(out, g)
		}
	}
	return out
}

// A signed billing.credit_grant.created (scope: one metered price) becomes
// one stripe_credit grant of the price's meter, its value converted at the
// price's unit_amount_decimal (1000 cents at 2.5 cents a token: 400
// tokens), with Stripe's priority and expiry, written to Redis where the
// limiter draws it. Replays grant nothing more; an .updated moving the
// expiry moves it, an older .updated delivered late does not move it back;
// a void in Stripe voids it and takes it out of Redis at once; a late
// .created after that does not revive it.
func TestStripeCreditGrantIsMirroredOnceAndFollowsStripe(t *testing.T) {
	f := newFakeStripe(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: f.URL})
	p := e.creditPlan(f)
	store := limitstore.New(e.rdb, e.prefix)
	id := newCreditGrantID()
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	exp := t0.Add(30 * 24 * time.Hour)
	created := func(updated time.Time, mut func(o map[string]any)) []byte {
		return creditEvent(t, "billing.credit_grant.created", id, p.customer, 1000, updated, func(o map[string]any) {
			scopePrices(p.tokPrice)(o)
			o["priority"], o["expires_at"], o["created"] = 10, exp.Unix(), t0.Unix()
			if mut != nil {
				mut(o)
			}
		})
	}
	e.processed(created(t0, nil))
	e.processed(created(t0, nil)) // a replay under another event id
	gs := e.stripeCredits(p.tenant)
	if len(gs) != 1 {
		t.Fatalf("after the event and its replay: %d grants, want 1: %+v", len(gs), gs)
	}
	g := gs[0]
	if g.Meter != "tokens" || g.Amount != 400 || g.Remaining != 400 || g.Priority != 10 || g.ExpiresAt == nil || !g.ExpiresAt.Equal(exp) ||
		!g.EffectiveAt.Equal(t0) || g.Status != credits.StatusActive || !strings.Contains(g.Reason, id) {
		t.Fatalf("mirrored grant: %+v (want 400 tokens, priority 10, effective %s, expiring %s)", g, t0, exp)
	}
	inRedis := func() (int64, bool) {
		m, err := store.Grants(context.Background(), p.tenant, "tokens")
		if err != nil {
			t.Fatal(err)
		}
		n, ok := m[g.ID]
		return n, ok
	}
	testkit.Eventually(t, 10*time.Second, "the grant is in Redis", func() bool { n, ok := inRedis(); return ok && n == 400 })

	// The expiry moves with Stripe's; an older object does not move it back.
	later := exp.Add(24 * time.Hour)
	e.processed(creditEvent(t, "billing.credit_grant.updated", id, p.customer, 1000, t0.Add(20*time.Second), func(o map[string]any) {
		scopePrices(p.tokPrice)(o)
		o["priority"], o["expires_at"], o["created"] = 10, later.Unix(), t0.Unix()
	}))
	e.processed(created(t0.Add(10*time.Second), nil))
	if g := e.stripeCredits(p.tenant); len(g) != 1 || g[0].ExpiresAt == nil || !g[0].ExpiresAt.Equal(later) {
		t.Fatalf("after the expiry moved (and an older object came late): %+v, want one grant expiring %s", g, later)
	}

	// Voided in Stripe (the spec's .updated, voided_at set): voided here and
	// gone from Redis.
	e.processed(fixtureFile(t, "spec/billing.credit_grant.updated.voided.json", "billing.credit_grant.updated", func(o map[string]any) {
		o["id"], o["customer"], o["updated"], o["voided_at"] = id, p.customer, t0.Add(30*time.Second).Unix(), t0.Add(30*time.Second).Unix()
		scopePrices(p.tokPrice)(o)
	}))
	gs = e.stripeCredits(p.tenant)
	if len(gs) != 1 || gs[0].Status != credits.StatusVoided || gs[0].Voided != 400 || gs[0].Remaining != 0 {
		t.Fatalf("after the void: %+v", gs)
	}
	took := testkit.Eventually(t, 10*time.Second, "the voided grant leaves Redis", func() bool { _, ok := inRedis(); return !ok })
	t.Logf("voided grant out of Redis %s after its event was processed", took)

	// A .created delivered after the void revives nothing.
	e.processed(created(t0, nil))
	if gs := e.stripeCredits(p.tenant); len(gs) != 1 || gs[0].Status != credits.StatusVoided {
		t.Fatalf("after a late .created: %+v", gs)
	}
}

// Stripe does not order deliveries: an .updated before its .created
// creates the grant, once; a voided .updated before its .created makes a
// voided grant that the .created does not revive.
func TestStripeCreditGrantUpdatedBeforeCreated(t *testing.T) {
	f := newFakeStripe(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: f.URL})
	p := e.creditPlan(f)
	now := time.Now().Truncate(time.Second)

	a := newCreditGrantID()
	e.processed(creditEvent(t, "billing.credit_grant.updated", a, p.customer, 250, now.Add(time.Second), scopePrices(p.tokPrice)))
	e.processed(creditEvent(t, "billing.credit_grant.created", a, p.customer, 250, now, scopePrices(p.tokPrice)))

	b := newCreditGrantID()
	e.processed(creditEvent(t, "billing.credit_grant.updated", b, p.customer, 500, now.Add(time.Second), func(o map[string]any) {
		scopePrices(p.tokPrice)(o)
		o["voided_at"] = now.Add(time.Second).Unix()
	}))
	e.processed(creditEvent(t, "billing.credit_grant.created", b, p.customer, 500, now, scopePrices(p.tokPrice)))

	byRef := map[string][]credits.Grant{}
	for _, g := range e.stripeCredits(p.tenant) {
		for _, ref := range []string{a, b} {
			if strings.Contains(g.Reason, ref) {
				byRef[ref] = append(byRef[ref], g)
			}
		}
	}
	if g := byRef[a]; len(g) != 1 || g[0].Amount != 100 || g[0].Status != credits.StatusActive {
		t.Fatalf("credit %s (updated, then created): %+v, want one active grant of 100 tokens", a, g)
	}
	if g := byRef[b]; len(g) != 1 || g[0].Amount != 200 || g[0].Status != credits.StatusVoided || g[0].Remaining != 0 {
		t.Fatalf("credit %s (voided, then created): %+v, want one voided grant of 200 tokens", b, g)
	}
}

// A price_type "metered" scope covers every metered price on the
// customer's live subscriptions, here two meters: the value is split
// evenly, each half converted at its own price (transform_quantity
// included) and rounded down, so the grants never cost more than the
// credit at Stripe's prices. metadata.tollgate_meter puts it all on one
// meter; naming a meter the credit does not cover is ignored, saying so.
func TestStripeCreditGrantCoveringSeveralMeters(t *testing.T) {
	f := newFakeStripe(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: f.URL})
	p := e.creditPlan(f)
	// The customer's subscription: the plan price and both metered prices.
	sub := "sub_" + p.customer
	start := time.Now().Add(-time.Hour)
	f.setSub(fakeSub(sub, p.customer, "active", start.Unix(), start.AddDate(0, 1, 0).Unix(),
		[3]any{"si_plan_" + sub, p.price, 1}, [3]any{"si_tok_" + sub, p.tokPrice, nil}, [3]any{"si_img_" + sub, p.imgPrice, nil}))
	e.processed(subEvent(t, "customer.subscription.created", newEventID(t), p.customer, sub, "active", p.price, time.Now()))

	split := newCreditGrantID()
	// The fixture's scope: price_type metered. Sent twice (a replay, and
	// its .updated): still one grant per meter.
	e.processed(creditEvent(t, "billing.credit_grant.created", split, p.customer, 1001, time.Now(), nil))
	e.processed(creditEvent(t, "billing.credit_grant.updated", split, p.customer, 1001, time.Now(), nil))
	one := newCreditGrantID()
	e.processed(creditEvent(t, "billing.credit_grant.created", one, p.customer, 1000, time.Now(), func(o map[string]any) {
		o["metadata"] = map[string]any{billing.MetaCreditMeter: "images"}
	}))
	bad := newCreditGrantID()
	r := e.waitEvent(e.postOK(creditEvent(t, "billing.credit_grant.created", bad, p.customer, 1000, time.Now(), func(o map[string]any) {
		o["metadata"] = map[string]any{billing.MetaCreditMeter: "requests"}
	})))
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), `"requests"`) || !strings.Contains(deref(r.Reason), "images, tokens") {
		t.Fatalf("tollgate_meter naming an uncovered meter: %s %s", r.Status, deref(r.Reason))
	}

	units := map[string]map[string]int64{}
	for _, g := range e.stripeCredits(p.tenant) {
		for _, ref := range []string{split, one, bad} {
			if strings.Contains(g.Reason, ref) {
				if units[ref] == nil {
					units[ref] = map[string]int64{}
				}
				units[ref][g.Meter] += g.Amount
			}
		}
	}
	// 1001 cents: 500 each (1 cent left over); 500 / 2.5 = 200 tokens,
	// 500 / (100 / 10) = 50 images.
	if n := len(e.stripeCredits(p.tenant)); n != 3 {
		t.Fatalf("%d grants, want 3: one per meter of the split credit, one of the images credit", n)
	}
	if got := units[split]; len(got) != 2 || got["tokens"] != 200 || got["images"] != 50 {
		t.Fatalf("split credit: %v, want 200 tokens and 50 images", got)
	}
	cost := new(big.Rat).Add(new(big.Rat).Mul(big.NewRat(200, 1), big.NewRat(5, 2)), new(big.Rat).Mul(big.NewRat(50, 1), big.NewRat(10, 1)))
	if cost.Cmp(big.NewRat(1001, 1)) > 0 {
		t.Fatalf("the split grants cost %s cents at Stripe's prices, more than the credit's 1001", cost)
	}
	if got := units[one]; len(got) != 1 || got["images"] != 100 {
		t.Fatalf("credit for images only: %v, want 100 images", got)
	}
	if got := units[bad]; len(got) != 0 {
		t.Fatalf("credit naming an uncovered meter granted %v", got)
	}
}

// counter reads one series of the env's registry (0 when absent).
func (e *env) counter(series string) float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					name += ","
				}
				name += l.GetName() + "=\"" + l.GetValue() + "\""
			}
			if name+"}" == series && m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Credit grants Tollgate cannot mirror are acknowledged (2xx), ignored
// with a reason naming what stopped them, counted by reason, and grant
// nothing; none is a 500 or a retry.
func TestStripeCreditGrantsThatCannotBeMirrored(t *testing.T) {
	f := newFakeStripe(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: f.URL})
	p := e.creditPlan(f)
	f.setMeteredPrice("price_eur_"+p.customer, "eur", "2", 1, "mtr_eur_"+p.customer, p.tokEvent)
	f.setMeteredPrice("price_other_"+p.customer, "usd", "2", 1, "mtr_other_"+p.customer, "some_other_meter")
	f.setPrice("price_licensed_"+p.customer, "month", "usd", 900)
	for _, c := range []struct {
		name, customer, reason, label string
		mutate                        func(o map[string]any)
	}{
		{"currency", p.customer, "is in eur, the credit in usd", "currency", scopePrices("price_eur_" + p.customer)},
		{"unknown customer", newCustomer(), "unknown customer", "unknown_customer", scopePrices(p.tokPrice)},
		{"unmapped meter", p.customer, `bills meter event "some_other_meter"`, "unmapped_price", scopePrices("price_other_" + p.customer)},
		{"price not in Stripe", p.customer, "price_gone is not in Stripe", "unmapped_price", scopePrices("price_gone")},
		{"price without meter", p.customer, "has no Billing Meter", "unmapped_price", scopePrices("price_licensed_" + p.customer)},
		{"no metered price on a subscription", p.customer, "has no price on a live subscription", "unmapped_price", nil},
		{"not monetary", p.customer, `of type "custom_pricing_unit"`, "not_monetary", func(o map[string]any) {
			scopePrices(p.tokPrice)(o)
			o["amount"] = map[string]any{"type": "custom_pricing_unit", "monetary": nil,
				"custom_pricing_unit": map[string]any{"id": "cpu_1", "value": "100", "custom_pricing_unit_details": nil}}
		}},
		{"billable items", p.customer, "billable_items", "scope", func(o map[string]any) {
			o["applicability_config"] = map[string]any{"scope": map[string]any{"billable_items": []any{map[string]any{"id": "bi_1"}}}}
		}},
		{"worth less than a unit", p.customer, "less than one unit", "too_small", func(o map[string]any) {
			scopePrices(p.tokPrice)(o)
			o["amount"].(map[string]any)["monetary"].(map[string]any)["value"] = 2
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			series := `tollgate_stripe_credit_grants_skipped_total{reason="` + c.label + `"}`
			before := e.counter(series)
			body := creditEvent(t, "billing.credit_grant.created", newCreditGrantID(), c.customer, 1000, time.Now(), c.mutate)
			resp := e.post(body)
			if resp.Status != 200 {
				t.Fatalf("webhook answered %d %s, want 200", resp.Status, resp.Raw)
			}
			var ev struct{ ID string }
			_ = json.Unmarshal(body, &ev)
			r := e.waitEvent(ev.ID)
			if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), c.reason) || r.LastErr != nil {
				t.Fatalf("%s: %s, reason %q, last error %v; want ignored naming %q", c.name, r.Status, deref(r.Reason), deref(r.LastErr), c.reason)
			}
			testkit.Eventually(t, 10*time.Second, series+" counts it", func() bool { return e.counter(series) == before+1 })
		})
	}
	if g := e.stripeCredits(p.tenant); len(g) != 0 {
		t.Fatalf("grants made: %+v", g)
	}
}

// Without STRIPE_SECRET_KEY a credit grant's prices cannot be read: it is
// ignored saying so (and counted), never guessed at.
func TestStripeCreditGrantWithoutKey(t *testing.T) {
	e := newEnv(t, envOpts{credits: true})
	p := e.creditPlan(nil)
	r := e.waitEvent(e.postOK(creditEvent(t, "billing.credit_grant.created", newCreditGrantID(), p.customer, 1000, time.Now(), scopePrices(p.tokPrice))))
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "STRIPE_SECRET_KEY") {
		t.Fatalf("without a key: %s %s", r.Status, deref(r.Reason))
	}
	testkit.Eventually(t, 10*time.Second, "counted", func() bool {
		return e.counter(`tollgate_stripe_credit_grants_skipped_total{reason="no_secret_key"}`) == 1
	})
	if g := e.stripeCredits(p.tenant); len(g) != 0 {
		t.Fatalf("grants made without a key: %+v", g)
	}
}

// pricedPlan is a plan whose quotas price one unit themselves (2.5 cents
// a token, 10 cents an image, a third meter in euros), and a tenant on it.
func (e *env) pricedPlan() (plan, tenant, customer string) {
	e.t.Helper()
	plan = "priced" + newCustomer()[5:]
	tok, img, eu := int64(100), int64(10), int64(5)
	in := catalogue.PlanInput{Key: plan, Name: plan, Quotas: map[string]*catalogue.QuotaInput{
		"tokens": {Limit: &tok, Mode: "soft", UnitAmountDecimal: "2.5", Currency: "usd"},
		"images": {Limit: &img, Mode: "soft", UnitAmountDecimal: "10", Currency: "usd"},
		"pages":  {Limit: &eu, Mode: "soft", UnitAmountDecimal: "1", Currency: "eur"},
		"calls":  {Limit: &eu}}}
	if _, err := e.cat.CreatePlan(context.Background(), in); err != nil {
		e.t.Fatal(err)
	}
	customer = newCustomer()
	return plan, e.tenant(plan, customer), customer
}

// Without STRIPE_SECRET_KEY a credit grant converts at the unit_amount_decimal
// its tenant's quotas set (issue 26 point 5's other source): price_type
// "metered" splits it over every quota priced in its currency; a scope of
// price ids, whose meters only Stripe knows, goes to the meter
// metadata.tollgate_meter names, and without that name is ignored saying
// so; a credit in a currency no quota is priced in grants nothing.
func TestStripeCreditGrantWithoutKeyConvertsAtTheQuotasUnitAmount(t *testing.T) {
	e := newEnv(t, envOpts{credits: true})
	_, tenant, customer := e.pricedPlan()
	split := newCreditGrantID()
	e.processed(creditEvent(t, "billing.credit_grant.created", split, customer, 1001, time.Now(), nil)) // scope: price_type metered
	named := newCreditGrantID()
	e.processed(creditEvent(t, "billing.credit_grant.created", named, customer, 1000, time.Now(), func(o map[string]any) {
		scopePrices("price_whatever")(o)
		o["metadata"] = map[string]any{billing.MetaCreditMeter: "tokens"}
	}))
	unnamed := newCreditGrantID()
	r := e.waitEvent(e.postOK(creditEvent(t, "billing.credit_grant.created", unnamed, customer, 1000, time.Now(), scopePrices("price_whatever"))))
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "metadata."+billing.MetaCreditMeter) {
		t.Fatalf("a price scope without tollgate_meter: %s %s", r.Status, deref(r.Reason))
	}
	yen := newCreditGrantID()
	r = e.waitEvent(e.postOK(creditEvent(t, "billing.credit_grant.created", yen, customer, 1000, time.Now(), func(o map[string]any) {
		o["amount"].(map[string]any)["monetary"].(map[string]any)["currency"] = "jpy"
	})))
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "prices none in jpy") || !strings.Contains(deref(r.Reason), "pages in eur") {
		t.Fatalf("a credit in a currency no quota is priced in: %s %s", r.Status, deref(r.Reason))
	}
	testkit.Eventually(t, 10*time.Second, "the skips counted", func() bool {
		return e.counter(`tollgate_stripe_credit_grants_skipped_total{reason="no_secret_key"}`) == 1 &&
			e.counter(`tollgate_stripe_credit_grants_skipped_total{reason="currency"}`) == 1
	})
	units := map[string]map[string]int64{}
	for _, g := range e.stripeCredits(tenant) {
		for _, ref := range []string{split, named, unnamed, yen} {
			if strings.Contains(g.Reason, ref) {
				if units[ref] == nil {
					units[ref] = map[string]int64{}
				}
				units[ref][g.Meter] += g.Amount
			}
		}
	}
	// 1001 cents over the two usd-priced quotas: 500 each; 500 / 2.5 = 200
	// tokens, 500 / 10 = 50 images (pages are priced in euros, calls not).
	if got := units[split]; len(got) != 2 || got["tokens"] != 200 || got["images"] != 50 {
		t.Fatalf("metered scope: %v, want 200 tokens and 50 images", got)
	}
	if got := units[named]; len(got) != 1 || got["tokens"] != 400 {
		t.Fatalf("price scope naming tokens: %v, want 400 tokens", got)
	}
	if len(units[unnamed]) != 0 || len(units[yen]) != 0 {
		t.Fatalf("ignored credits granted: %v, %v", units[unnamed], units[yen])
	}
}

// With the key, a tiered price (no unit_amount_decimal in Stripe) converts
// at its quota's unit_amount_decimal when the quota sets one in the
// credit's currency, and is ignored naming the price when it does not.
func TestStripeCreditGrantAtATieredPriceUsesTheQuotasUnitAmount(t *testing.T) {
	f := newFakeStripe(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: f.URL})
	plan, tenant, customer := e.pricedPlan()
	if _, err := e.cat.PatchPlan(context.Background(), plan, func(in *catalogue.PlanInput) error {
		in.Quotas["tokens"].StripeMeterEvent = "tg_tok_" + plan
		in.Quotas["calls"].StripeMeterEvent = "tg_calls_" + plan
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.setMeteredPrice("price_tiered_"+plan, "usd", "", 1, "mtr_tok_"+plan, "tg_tok_"+plan)
	f.setMeteredPrice("price_tiered_calls_"+plan, "usd", "", 1, "mtr_calls_"+plan, "tg_calls_"+plan)
	tiered := newCreditGrantID()
	e.processed(creditEvent(t, "billing.credit_grant.created", tiered, customer, 1000, time.Now(), scopePrices("price_tiered_"+plan)))
	var got []credits.Grant
	for _, g := range e.stripeCredits(tenant) {
		if strings.Contains(g.Reason, tiered) {
			got = append(got, g)
		}
	}
	if len(got) != 1 || got[0].Meter != "tokens" || got[0].Amount != 400 {
		t.Fatalf("tiered price, quota at 2.5 cents: %+v, want one grant of 400 tokens", got)
	}
	r := e.waitEvent(e.postOK(creditEvent(t, "billing.credit_grant.created", newCreditGrantID(), customer, 1000, time.Now(), scopePrices("price_tiered_calls_"+plan))))
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "price_tiered_calls_"+plan+" has no positive unit_amount_decimal") {
		t.Fatalf("tiered price, quota without a unit amount: %s %s", r.Status, deref(r.Reason))
	}
}

// A credit grant on a newer API version (endive), with fields Tollgate does
// not read (customer_account, amount.custom_pricing_unit: null, and ones
// no version has yet), is mirrored like any other.
func TestStripeCreditGrantOnANewerAPIVersion(t *testing.T) {
	f := newFakeStripe(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: f.URL})
	p := e.creditPlan(f)
	raw, err := os.ReadFile(filepath.Join(fixtures, "versions/billing.credit_grant.2026-09-30.endive.json"))
	if err != nil {
		t.Fatal(err)
	}
	id := newCreditGrantID()
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	ev["id"], ev["created"] = newEventID(t), time.Now().Unix()
	o := ev["data"].(map[string]any)["object"].(map[string]any)
	o["id"], o["customer"] = id, p.customer
	scopePrices(p.tokPrice)(o)
	body, _ := json.Marshal(ev)
	e.processed(body)
	g := e.stripeCredits(p.tenant)
	if len(g) != 1 || g[0].Amount != 400 || g[0].Priority != 20 || g[0].ExpiresAt != nil || !strings.Contains(g[0].Reason, "Prepaid usage") {
		t.Fatalf("endive credit grant: %+v", g)
	}
}

// meterEventsSent sums the meter events of event name for customer the
// fake Stripe accepted.
func (f *fakeStripe) meterEventsSent(t *testing.T, name, customer string) int64 {
	t.Helper()
	var n int64
	for _, p := range f.postsTo("/v1/billing/meter_events") {
		if p.Form.Get("event_name") == name && p.Form.Get("payload[stripe_customer_id]") == customer {
			v, err := strconv.ParseInt(p.Form.Get("payload[value]"), 10, 64)
			if err != nil {
				t.Fatalf("meter event value %q: %v", p.Form.Get("payload[value]"), err)
			}
			n += v
		}
	}
	return n
}

// Issue 26 point 5 end to end: a Stripe credit grant mirrored from a
// signed billing.credit_grant.created is drawn by the limiter after the
// included quota, flushed, and its units ARE reported to Stripe as usage
// (Stripe applies the credit on the invoice); an admin grant drawn in the
// same window is NOT reported (the tenant prepaid it here). 220 tokens on
// an included 100, a Stripe credit of 100 tokens (priority 10, drawn
// first) and an admin grant of 50 (priority 20): the report is 100, the
// Stripe credit's units; 0 would discount them twice, 120 would bill the
// admin grant's 20.
func TestStripeCreditUnitsAreReportedAndPrepaidUnitsAreNot(t *testing.T) {
	f := newFakeStripe(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: f.URL})
	ctx := context.Background()
	p := e.creditPlan(f)
	store := limitstore.New(e.rdb, e.prefix)
	meter := metering.NewService(e.pool, store, nil, metering.Options{Snapshot: e.ents.CachedSnapshot, Prepaid: e.creds.PrepaidConsumed,
		GrantDraws: func(ctx context.Context, tx pgx.Tx, ds []metering.GrantDraw) error {
			in := make([]credits.Draw, len(ds))
			for i, d := range ds {
				in[i] = credits.Draw{FlushID: d.FlushID, GrantID: d.GrantID, PeriodStart: d.PeriodStart, Units: d.Units}
			}
			_, err := e.creds.RecordDrawsTx(ctx, tx, in)
			return err
		}})
	lim, err := limiter.New(e.rdb, limiter.Options{Prefix: e.prefix, Timeout: 5 * time.Second, Loader: e.ents.ReloadSnapshot,
		UsageLoader: meter.LoadUsage, GrantLoader: e.creds.RedisGrants})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })

	// 250 cents at 2.5 cents a token: 100 tokens.
	id := newCreditGrantID()
	e.processed(creditEvent(t, "billing.credit_grant.created", id, p.customer, 250, time.Now(), func(o map[string]any) {
		scopePrices(p.tokPrice)(o)
		o["priority"] = 10
	}))
	sc := e.stripeCredits(p.tenant)
	if len(sc) != 1 || sc[0].Amount != 100 {
		t.Fatalf("mirrored: %+v", sc)
	}
	amount, prio := int64(50), 20
	admin, err := e.creds.Create(ctx, p.tenant, credits.GrantInput{Meter: "tokens", Amount: &amount, Priority: &prio})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 22 {
		d, err := lim.Allow(ctx, p.tenant, limiter.Request{Meter: "tokens", Cost: 10})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("request %d refused on a soft quota: %+v", i, d)
		}
	}
	if _, err := meter.FlushOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		id   string
		want int64
	}{{sc[0].ID, 100}, {admin.ID, 20}} {
		g, err := e.creds.Get(ctx, w.id)
		if err != nil {
			t.Fatal(err)
		}
		if g.Consumed != w.want {
			t.Fatalf("grant %s (%s): consumed %d after the flush, want %d", g.ID, g.Source, g.Consumed, w.want)
		}
	}
	if _, err := meter.ReportToStripe(ctx, metering.NewStripeMeterSender("sk_test_123", f.URL)); err != nil {
		t.Fatal(err)
	}
	if got := f.meterEventsSent(t, p.tokEvent, p.customer); got != 100 {
		t.Fatalf("reported %d tokens to Stripe, want 100: 220 used − 100 included − 20 of the admin grant; the Stripe credit's 100 stay reported", got)
	}
}

// The prices a credit grant covers are read through stripe-go from an API
// that answers in Stripe's spec shape (stripe-mock): its canned price has no
// Billing Meter, so the credit grant is ignored saying so, not failed and
// not retried.
func TestStripeCreditGrantPricesReadFromStripeMock(t *testing.T) {
	base := stripemock.Start(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: base})
	p := e.creditPlan(nil)
	r := e.waitEvent(e.postOK(creditEvent(t, "billing.credit_grant.created", newCreditGrantID(), p.customer, 1000, time.Now(), scopePrices(p.tokPrice))))
	t.Logf("stripe-mock: %s %s", r.Status, deref(r.Reason))
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "has no Billing Meter") || r.Attempts != 1 {
		t.Fatalf("credit grant against stripe-mock: %s (attempts %d) %s %s", r.Status, r.Attempts, deref(r.Reason), deref(r.LastErr))
	}
}
