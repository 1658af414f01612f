package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/credits"
)

// The tenant's dashboard shows its credits: per meter the units active
// grants have left, each grant with its expiry, a pending grant with when
// it takes effect (and not in what is available), and nothing of a voided
// grant; another tenant's grants never.
func TestDashboardShowsCreditBalance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Hooli", b.pro)
	other := b.tenant(t, "Other", b.pro)
	grant := func(tenant, meter string, amount int64, in credits.GrantInput) credits.Grant {
		t.Helper()
		in.Meter, in.Amount = meter, &amount
		g, err := b.creds.Create(b.ctx, tenant, in)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	br := b.browser(t)
	br.loginKey(b.key(t, tn.ID).Key)
	if body := br.get("/dashboard").body; strings.Contains(body, `id="credits"`) {
		t.Fatal("a tenant without grants is shown a credits section")
	}

	in30 := time.Now().Add(30 * 24 * time.Hour)
	later := time.Now().Add(48 * time.Hour)
	promo := grant(tn.ID, "requests", 5000, credits.GrantInput{ExpiresAt: &in30, Reason: "launch promo"})
	grant(tn.ID, "requests", 1200, credits.GrantInput{})
	pending := grant(tn.ID, "requests", 700, credits.GrantInput{EffectiveAt: &later})
	grant(tn.ID, "exports", 30, credits.GrantInput{})
	voided := grant(tn.ID, "exports", 999, credits.GrantInput{})
	if _, err := b.creds.Void(b.ctx, voided.ID); err != nil {
		t.Fatal(err)
	}
	grant(other.ID, "requests", 424242, credits.GrantInput{})

	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "dashboard")
	wantIn(t, page.body, `id="credits"`, `data-credits="requests"`, `data-available="6200"`, `data-credits="exports"`, `data-available="30"`,
		`data-grant="`+promo.ID+`"`, "5,000 of 5,000", "launch promo", "expires "+fmtTime(*promo.ExpiresAt), "never expires",
		`data-grant="`+pending.ID+`"`, "700 of 700, from")
	for _, absent := range []string{voided.ID, "424,242"} {
		if strings.Contains(page.body, absent) {
			t.Fatalf("the dashboard shows %q", absent)
		}
	}
}
