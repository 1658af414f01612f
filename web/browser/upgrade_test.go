package browser_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/tollgatehq/tollgate/internal/stripemock"
	"github.com/tollgatehq/tollgate/web/webtest"
)

// In Chromium: the tenant sees the plans it may pick next to its own,
// clicks "Upgrade", and lands on the Checkout URL that Stripe (stripe-mock)
// answered for its session. The machine has no internet, so Chromium's
// requests to checkout.stripe.com are answered by the test through the
// DevTools Fetch domain: what is checked is that the browser went there,
// through the page's CSP, with the URL Stripe gave.
func TestBrowserPlanChangeGoesToCheckout(t *testing.T) {
	chrome := newChrome(t)
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	b := setupWith(t, webtest.Options{StripeBase: rec.URL})
	gold, staff := b.OfferPlans(t)
	tn := b.Tenant(t, "Umbrella Labs", b.Free)
	key := b.Key(t, tn.ID)
	base := b.srv.URL

	tab := user(t, chrome)
	step(t, tab, "login page", chromedp.Navigate(base+"/dashboard/login"))
	do(t, tab, "type key", chromedp.SetValue(chromedp.CSS("#api_key"), key.Key))
	if st := step(t, tab, "login", chromedp.Submit(chromedp.CSS("#api_key"))); st != http.StatusOK {
		t.Fatalf("login: %d", st)
	}
	offered := run(t, tab, "offered plans", chromedp.Evaluate[string](`[...document.querySelectorAll('#plan button[data-plan]')].map(b => b.dataset.plan).join(',')`))
	// Other tests of the package add plans to the same database; these
	// three are this test's.
	if got := strings.Split(offered, ","); !slices.Contains(got, gold) || slices.Contains(got, staff) || slices.Contains(got, b.Pro) {
		t.Fatalf("buttons for %q, want %s and neither the internal %s nor the unpriced %s", offered, gold, staff, b.Pro)
	}
	if cur := text(t, tab, "#plan tr.current th"); !strings.Contains(cur, "Free") || !strings.Contains(cur, "your plan") {
		t.Fatalf("current plan row %q", cur)
	}
	screenshot(t, tab, "dashboard-plans-1280", 1280)
	screenshot(t, tab, "dashboard-plans-375", 375)

	var mu sync.Mutex
	var reached []string
	if _, err := chromedp.Call(tab, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "https://checkout.stripe.com/*"}}}); err != nil {
		t.Fatal(err)
	}
	paused := chromedp.Events(tab, fetch.RequestPaused)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			if ev.ResourceType == network.ResourceTypeDocument { // not the favicon
				mu.Lock()
				reached = append(reached, ev.Request.URL)
				mu.Unlock()
			}
			_, _ = chromedp.Call(tab, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: ev.RequestID, ResponseCode: 200,
				ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html"}},
				Body:            []byte(`<!doctype html><title>Stripe Checkout</title><h1 id="stripe">Stripe Checkout (answered by the test)</h1>`)})
		}
	}()
	if st := step(t, tab, "upgrade", chromedp.Click(chromedp.CSS(`#plan button[data-plan="`+gold+`"]`))); st != http.StatusOK {
		t.Fatalf("after the click: %d", st)
	}
	sessions := rec.Posts("/v1/checkout/sessions")
	if len(sessions) != 1 {
		t.Fatalf("%d Checkout Sessions, want 1", len(sessions))
	}
	want, _ := sessions[0].Answer["url"].(string)
	if want == "" || location(t, tab) != want {
		t.Fatalf("at %s, want the Checkout URL Stripe answered %q", location(t, tab), want)
	}
	mu.Lock()
	got := append([]string(nil), reached...)
	mu.Unlock()
	if len(got) != 1 || got[0] != want {
		t.Fatalf("pages loaded from Stripe's Checkout %v, want one: %s", got, want)
	}
	if h := text(t, tab, "#stripe"); !strings.Contains(h, "Stripe Checkout") {
		t.Fatalf("page %q", h)
	}
	if sessions[0].Form.Get("client_reference_id") != tn.ID || b.PlanOf(t, tn.ID) != b.Free {
		t.Fatal("the session is not the tenant's, or the plan changed before Stripe confirmed")
	}
}
