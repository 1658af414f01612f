package billing_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
)

// The API versions real accounts send: the one stripe-go v79 pins, acacia,
// and basil on (clover, dahlia, endive), which moved the period onto
// subscription items and an invoice's subscription under
// parent.subscription_details.
var apiVersions = []string{"2024-06-20", "2024-09-30.acacia", "2025-03-31.basil", "2025-09-30.clover", "2026-03-25.dahlia", "2026-09-30.endive"}

// vev fills a versioned fixture (testdata/stripe/events/versions).
type vev struct {
	version, typ, id        string
	sub, cus, item, price   string
	status, invoice, tenant string
	qty, attempts           int
	start, end, created     time.Time
	previous                map[string]any // data.previous_attributes
	mutate                  func(o map[string]any)
	extraItems              []map[string]any
}

func versioned(t testing.TB, kind string, p vev) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata/stripe/events/versions", kind+"."+p.version+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if p.qty == 0 {
		p.qty = 1
	}
	if p.item == "" {
		p.item = "si_" + p.sub
	}
	if p.invoice == "" {
		p.invoice = "in_" + p.sub
	}
	r := strings.NewReplacer("{{SUB}}", p.sub, "{{CUS}}", p.cus, "{{ITEM}}", p.item, "{{PRICE}}", p.price, "{{STATUS}}", p.status,
		"{{INVOICE}}", p.invoice, "{{TENANT}}", p.tenant, "{{QTY}}", strconv.Itoa(p.qty), "{{ATTEMPTS}}", strconv.Itoa(p.attempts),
		"{{START}}", strconv.FormatInt(p.start.Unix(), 10), "{{END}}", strconv.FormatInt(p.end.Unix(), 10))
	var ev map[string]any
	if err := json.Unmarshal([]byte(r.Replace(string(raw))), &ev); err != nil {
		t.Fatal(err)
	}
	ev["id"], ev["type"], ev["created"] = p.id, p.typ, p.created.Unix()
	data := ev["data"].(map[string]any)
	o := data["object"].(map[string]any)
	if items, ok := o["items"].(map[string]any); ok && len(p.extraItems) > 0 {
		items["data"] = append(items["data"].([]any), anySlice(p.extraItems)...)
	}
	if p.previous != nil {
		data["previous_attributes"] = p.previous
	}
	if p.mutate != nil {
		p.mutate(o)
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func anySlice(ms []map[string]any) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// processed posts a signed event and waits until it is applied.
func (e *env) processed(body []byte) {
	e.t.Helper()
	var ev struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &ev)
	if r := e.post(body); r.Status != http.StatusOK {
		e.t.Fatalf("post %s: %d %s", ev.ID, r.Status, r.Raw)
	}
	if r := e.waitEvent(ev.ID); r.Status != billing.StatusProcessed {
		e.t.Fatalf("event %s: %s %s %s", ev.ID, r.Status, deref(r.Reason), deref(r.LastErr))
	}
}

// Every API version is processed, without a secret key, from the fields
// read where that version puts them: Checkout links, the subscription sets
// plan and period (from the items on basil and clover), a failed payment
// changes no status, invoice.paid of the latest invoice (found under
// parent.subscription_details from basil on) ends past_due, a renewal
// invoice rolls the period, deletion falls back. The console's event
// record names the version.
func TestEveryAPIVersionIsProcessedFromThePayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	for _, v := range apiVersions {
		t.Run(v, func(t *testing.T) {
			e.t = t
			cus, sub := newCustomer(), "sub_v_"+newCustomer()
			tenant := e.tenant("free", "")
			base := time.Now().Add(-time.Minute).Truncate(time.Second)
			start, end := base.Add(-24*time.Hour), base.Add(-24*time.Hour).AddDate(0, 1, 0)
			p := vev{version: v, sub: sub, cus: cus, price: "price_pro_test", status: "active", tenant: tenant, start: start, end: end}

			p.typ, p.id, p.created = "checkout.session.completed", newEventID(t), base
			e.processed(versioned(t, "checkout.session.completed", p))
			if r := e.admin(http.MethodGet, "/admin/v1/tenants/"+tenant, nil); r.Body["stripe_customer_id"] != cus {
				t.Fatalf("checkout did not link: %s", r.Raw)
			}
			p.typ, p.id, p.created = "customer.subscription.created", newEventID(t), base.Add(time.Second)
			e.processed(versioned(t, "subscription", p))
			snap := e.snapshot(tenant)
			if snap.Plan != "pro" || snap.Status != "active" || !snap.PeriodStart.Equal(start) {
				t.Fatalf("after created: plan %s status %s period start %s, want pro active %s", snap.Plan, snap.Status, snap.PeriodStart, start)
			}
			ev := e.admin(http.MethodGet, "/admin/v1/stripe/events/"+p.id, nil)
			if ev.Body["api_version"] != v {
				t.Fatalf("stored api_version %v, want %s", ev.Body["api_version"], v)
			}

			p.typ, p.id, p.created, p.attempts = "invoice.payment_failed", newEventID(t), base.Add(2*time.Second), 1
			e.processed(versioned(t, "invoice", p))
			if st := e.sub(sub); st.Status != "active" || st.Attempts != 1 {
				t.Fatalf("payment_failed: %+v, want active with 1 attempt (status comes from the subscription)", st)
			}
			p.typ, p.id, p.created, p.status = "customer.subscription.updated", newEventID(t), base.Add(3*time.Second), "past_due"
			e.processed(versioned(t, "subscription", p))
			if st := e.sub(sub); st.Status != "past_due" || st.GraceEndsAt == nil {
				t.Fatalf("past_due: %+v", st)
			}
			p.typ, p.id, p.created = "invoice.paid", newEventID(t), base.Add(4*time.Second)
			e.processed(versioned(t, "invoice", p))
			if st := e.sub(sub); st.Status != "active" || st.GraceEndsAt != nil {
				t.Fatalf("invoice.paid: %+v, want active without grace", st)
			}
			// The renewal invoice carries the next period on its subscription line.
			next := vev(p)
			next.typ, next.id, next.created, next.start, next.end = "invoice.created", newEventID(t), base.Add(5*time.Second), end, end.AddDate(0, 1, 0)
			e.processed(versioned(t, "invoice", next))
			if st := e.sub(sub); st.PeriodStart == nil || !st.PeriodStart.Equal(end) {
				t.Fatalf("invoice.created: period start %v, want %s", st.PeriodStart, end)
			}
			p.typ, p.id, p.created, p.status = "customer.subscription.deleted", newEventID(t), base.Add(6*time.Second), "canceled"
			e.processed(versioned(t, "subscription", p))
			if snap := e.snapshot(tenant); snap.Plan != "free" || snap.Status != "canceled" {
				t.Fatalf("deleted: plan %s status %s, want free canceled", snap.Plan, snap.Status)
			}
		})
	}
}
