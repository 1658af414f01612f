package browser_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
)

// creditsPlan is a plan of 100 included requests and no rate limit, so a
// check's cost alone decides what is drawn from grants.
func (b *bundle) creditsPlan(t *testing.T) string {
	t.Helper()
	key := uniq("credits")
	b.Plan(t, catalogue.PlanInput{Key: key, Name: "Credits",
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100)}}})
	return key
}

// check posts /v1/check of cost with key and returns the status.
func (b *bundle) check(t *testing.T, key string, cost int) int {
	t.Helper()
	return apiJSON(t, http.MethodPost, b.srv.URL+"/v1/check", key, `{"cost": `+itoa(int64(cost))+`}`, nil)
}

// In Chromium: a tenant who used its plan's 100 included requests and 120
// units of a 500-unit grant sees, on its dashboard, 380 units available and
// the grant at "380 of 500" with its expiry and reason, as the limiter
// decided them in Redis, before any flush writes the draw to Postgres; a
// grant not yet in effect shows when it starts and is not counted.
func TestBrowserDashboardCreditBalance(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	tn := b.Tenant(t, "Initech", b.creditsPlan(t))
	key := b.Key(t, tn.ID)
	in30, tomorrow := time.Now().Add(30*24*time.Hour), time.Now().Add(24*time.Hour)
	amount, later := int64(500), int64(200)
	promo, err := b.Creds.Create(b.Ctx, tn.ID, credits.GrantInput{Meter: "requests", Amount: &amount, ExpiresAt: &in30, Reason: "launch promo"})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := b.Creds.Create(b.Ctx, tn.ID, credits.GrantInput{Meter: "requests", Amount: &later, EffectiveAt: &tomorrow})
	if err != nil {
		t.Fatal(err)
	}
	for _, cost := range []int{100, 120} {
		if st := b.check(t, key.Key, cost); st != http.StatusOK {
			t.Fatalf("check of %d: %d", cost, st)
		}
	}
	// 380 left: a cost of 381 is refused, which is what the page must say.
	if st := b.check(t, key.Key, 381); st != http.StatusTooManyRequests {
		t.Fatalf("check past the grant: %d, want 429", st)
	}
	if n := b.Fallbacks.Load(); n != 0 {
		t.Fatalf("%d decisions went to the fail mode", n)
	}

	u := user(t, chrome)
	step(t, u, "login page", chromedp.Navigate(b.srv.URL+"/dashboard/login"))
	do(t, u, "type key", chromedp.SendKeys(chromedp.CSS("#api_key"), key.Key))
	if st := step(t, u, "log in", chromedp.SendKeys(chromedp.CSS("#api_key"), "\r")); st != http.StatusOK {
		t.Fatalf("after login: %d", st)
	}
	if got := text(t, u, `[data-credits="requests"] .available`); got != "380" {
		t.Fatalf("available %q, want 380", got)
	}
	row := text(t, u, `li[data-grant="`+promo.ID+`"]`)
	for _, want := range []string{"380 of 500", "expires " + promo.ExpiresAt.UTC().Format("2 Jan 2006 15:04 UTC"), "launch promo"} {
		if !strings.Contains(row, want) {
			t.Errorf("promo grant reads %q, want %q in it", row, want)
		}
	}
	if row := text(t, u, `li[data-grant="`+pending.ID+`"]`); !strings.Contains(row, "200 of 200, from") {
		t.Errorf("pending grant reads %q", row)
	}
	screenshot(t, u, "dashboard-credits", 1280)
}

// In Chromium: an admin issues a grant from the tenant page (a bad amount
// first, named next to the form, nothing issued), the tenant draws from
// it, the row shows what Redis holds; Void asks for a confirmation that
// says what is lost, and after it the grant is voided and no longer drawn:
// the next check past the included quota is refused.
func TestBrowserConsoleGrantsPanel(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	tn := b.Tenant(t, "Umbrella", b.creditsPlan(t))
	key := b.Key(t, tn.ID)
	base := b.srv.URL
	admin := b.consoleTab(t, chrome, b.Admin)
	step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+tn.ID))

	fill := func(amount string) int64 {
		t.Helper()
		do(t, admin, "fill the grant form",
			chromedp.SetValue(chromedp.CSS("#gr-meter"), "requests"),
			chromedp.SetValue(chromedp.CSS("#gr-amount"), amount),
			chromedp.SetValue(chromedp.CSS("#gr-prio"), "10"),
			chromedp.SetValue(chromedp.CSS("#gr-days"), "30"),
			chromedp.SetValue(chromedp.CSS("#gr-reason"), "make good"))
		return step(t, admin, "issue", chromedp.Click(chromedp.CSS(`#grant-form button[type="submit"]`)))
	}
	if st := fill("-5"); st != http.StatusBadRequest {
		t.Fatalf("a negative amount: %d, want 400", st)
	}
	if msg := text(t, admin, `#grant-form [role="alert"]`); !strings.Contains(msg, "amount") {
		t.Fatalf("the refusal reads %q, want the amount named", msg)
	}
	if gs, _ := b.Creds.List(b.Ctx, tn.ID); len(gs) != 0 {
		t.Fatalf("a refused form issued %+v", gs)
	}
	if st := fill("5,000"); st != http.StatusOK {
		t.Fatalf("issue: %d", st)
	}
	if loc := location(t, admin); !strings.HasSuffix(loc, "?done=granted#grants") {
		t.Fatalf("after issuing at %s", loc)
	}
	gs, err := b.Creds.List(b.Ctx, tn.ID)
	if err != nil || len(gs) != 1 {
		t.Fatalf("grants %+v %v", gs, err)
	}
	g := gs[0]
	// The included 100, then 250 of the grant.
	for _, cost := range []int{100, 250} {
		if st := b.check(t, key.Key, cost); st != http.StatusOK {
			t.Fatalf("check of %d: %d", cost, st)
		}
	}
	step(t, admin, "reload", chromedp.Reload())
	rowSel := `tr[data-grant="` + g.ID + `"]`
	if row := text(t, admin, rowSel); !strings.Contains(row, "4,750 of 5,000") || !strings.Contains(row, "make good") || !strings.Contains(row, "active") {
		t.Fatalf("grant row reads %q", row)
	}

	if st := step(t, admin, "void", chromedp.Click(chromedp.CSS(rowSel+` form button`))); st != http.StatusOK {
		t.Fatalf("void: %d", st)
	}
	if msg := text(t, admin, "main"); !strings.Contains(msg, "Void a requests grant of Umbrella?") {
		t.Fatalf("the confirmation reads %q", msg)
	}
	if cur, _ := b.Creds.Get(b.Ctx, g.ID); cur.VoidedAt != nil {
		t.Fatal("voided before the confirmation")
	}
	if st := b.check(t, key.Key, 1); st != http.StatusOK {
		t.Fatalf("before the confirmation the grant still draws: %d", st)
	}
	step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button")))
	if st := run(t, admin, "status", chromedp.AttributeValue(chromedp.CSS(rowSel), "data-status")).Value; st != "voided" {
		t.Fatalf("status after the void %q", st)
	}
	if st := b.check(t, key.Key, 1); st != http.StatusTooManyRequests {
		t.Fatalf("a check after the void: %d, want 429 (the grant no longer drawn)", st)
	}
}
