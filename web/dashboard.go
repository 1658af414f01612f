package web

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/credits"
)

// loginPage is the data of the dashboard login page.
type loginPage struct {
	Token      string // a dashboard link's token, waiting for "Continue"
	TenantName string
	LinkError  string
	LoggedOut  bool
	Error      string
}

// handleDashboardLoginPage shows the API key form, or, for a dashboard link,
// a "Continue" button: the link is only used by the POST, so a mail scanner
// or a link preview that fetches the URL cannot burn it.
func (w *Web) handleDashboardLoginPage() echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		p := page{Title: "Log in to your dashboard", CSRF: preToken(c, "/dashboard")}
		lp := loginPage{LoggedOut: c.QueryParam("out") != ""}
		status := http.StatusOK
		if tok := c.QueryParam("token"); tok != "" || c.QueryParams().Has("token") {
			tid, err := w.store.peekLink(ctx, tok)
			switch {
			case apperr.CodeOf(err) == apperr.Unauthorized:
				lp.LinkError, status = err.Error(), http.StatusGone
			case err != nil:
				return err
			default:
				t, err := w.store.tenant(ctx, tid)
				if err != nil {
					return err
				}
				lp.Token, lp.TenantName = tok, t.Name
			}
		}
		p.Data = lp
		return w.render(c, status, "login", p)
	}
}

// handleDashboardLogin logs in with a dashboard link's token or an API key.
func (w *Web) handleDashboardLogin() echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		var tenantID string
		var cred credential
		if tok := c.FormValue("token"); tok != "" {
			tid, err := w.store.useLink(ctx, tok)
			if apperr.CodeOf(err) == apperr.Unauthorized {
				if err := w.guardFailed(c, "key"); err != nil {
					return err
				}
				return w.render(c, http.StatusGone, "login", page{Title: "Log in to your dashboard", CSRF: preToken(c, "/dashboard"),
					Data: loginPage{LinkError: err.Error()}})
			}
			if err != nil {
				return err
			}
			tenantID = tid
		} else {
			key := strings.TrimSpace(c.FormValue("api_key"))
			if key == "" || w.Keys == nil {
				return w.render(c, http.StatusUnauthorized, "login", page{Title: "Log in to your dashboard", CSRF: preToken(c, "/dashboard"),
					Data: loginPage{Error: "Enter an API key of your account."}})
			}
			info, err := w.Keys.AuthenticateKey(ctx, key, w.guardBlocked(c, "key"))
			if apperr.CodeOf(err) == apperr.Unauthorized || apperr.CodeOf(err) == apperr.NotFound || apperr.CodeOf(err) == apperr.Invalid {
				if err := w.guardFailed(c, "key"); err != nil {
					return err
				}
				return w.render(c, http.StatusUnauthorized, "login", page{Title: "Log in to your dashboard", CSRF: preToken(c, "/dashboard"),
					Data: loginPage{Error: "That API key is unknown or revoked."}})
			}
			if err != nil {
				return err
			}
			tenantID, cred.apiKeyID = info.TenantID, info.KeyID
		}
		raw, _, err := w.store.createSession(ctx, kindTenant, tenantID, cred, w.TenantTTL)
		if err != nil {
			return err
		}
		setCookie(c, cookieTenant, raw, "/dashboard", int(w.TenantTTL.Seconds()))
		clearCookie(c, cookiePre, "/dashboard")
		return c.Redirect(http.StatusSeeOther, "/dashboard")
	}
}

// dashboardPage is the data of the dashboard.
type dashboardPage struct {
	UsageView
	Keys    []KeyRow
	Plans   []PlanRow
	NewKey  *newKey
	CanKeys bool
	Choice  planChoice
	// Credits are the tenant's prepaid units per meter (nil without a
	// GrantManager, or when it has no grant that can still be drawn).
	Credits []creditBalance
	// Topups are what "Buy more" offers: the mapped top-ups, when a
	// TopupBuyer (Stripe) is wired.
	Topups     []credits.Topup
	TopupError string
}

// creditBalance is what a tenant's grants of one meter hold: the units
// active grants have left, and the grants themselves (pending ones too,
// which add nothing to Available until they take effect).
type creditBalance struct {
	Meter     string
	Available int64
	Grants    []credits.Grant
}

// creditBalances groups the grants that can still be drawn by meter, the
// meters by name and each meter's grants in the order given.
func creditBalances(gs []credits.Grant) []creditBalance {
	var out []creditBalance
	at := map[string]int{}
	for _, g := range gs {
		if g.Status != credits.StatusActive && g.Status != credits.StatusPending {
			continue
		}
		i, ok := at[g.Meter]
		if !ok {
			i = len(out)
			at[g.Meter] = i
			out = append(out, creditBalance{Meter: g.Meter})
		}
		if g.Status == credits.StatusActive {
			out[i].Available += g.Remaining
		}
		out[i].Grants = append(out[i].Grants, g)
	}
	slices.SortStableFunc(out, func(a, b creditBalance) int { return strings.Compare(a.Meter, b.Meter) })
	return out
}

type newKey struct {
	Key    string
	Prefix string
	Name   string
}

// dashboard builds the page for the session's tenant: the tenant id comes
// from the session and nowhere else.
func (w *Web) dashboard(c echo.Context, nk *newKey) (page, error) {
	ctx := c.Request().Context()
	tid := sessionFrom(c).TenantID
	u, err := w.usageView(ctx, tid)
	if err != nil {
		return page{}, err
	}
	keys, err := w.store.keys(ctx, tid)
	if err != nil {
		return page{}, err
	}
	plans, err := w.store.plans(ctx)
	if err != nil {
		return page{}, err
	}
	d := dashboardPage{UsageView: u, Keys: keys, Plans: plans, NewKey: nk, CanKeys: w.Keys != nil, Choice: w.planChoiceOf(ctx, plans, u)}
	if w.Grants != nil {
		gs, err := w.grantsOf(ctx, tid)
		if err != nil {
			return page{}, err
		}
		d.Credits = creditBalances(gs)
		if w.Topups != nil {
			if d.Topups, err = w.Grants.ListTopups(ctx); err != nil {
				return page{}, err
			}
		}
	}
	return page{Title: u.Tenant.Name + " · usage", Nav: "usage", Data: d}, nil
}

func (w *Web) handleDashboard() echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := w.dashboard(c, nil)
		if err != nil {
			return err
		}
		switch c.QueryParam("done") {
		case "revoked":
			p.Notice = "The API key was revoked; requests with it are refused from now on."
		}
		if n, ok := planNotices[c.QueryParam("plan")]; ok {
			p.Notice = n
		}
		if n, ok := topupNotices[c.QueryParam("topup")]; ok {
			p.Notice = n
		}
		return w.render(c, http.StatusOK, "dashboard", p)
	}
}

// handleDashboardIssueKey issues a key and shows it once, in the response
// itself (never in a URL or a cookie).
func (w *Web) handleDashboardIssueKey() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Keys == nil {
			return apperr.New(apperr.NotFound, "issuing keys is not available here")
		}
		name := strings.TrimSpace(c.FormValue("name"))
		if len(name) > 200 {
			return apperr.Invalidf("name", "must be at most 200 characters")
		}
		k, err := w.Keys.IssueKey(c.Request().Context(), sessionFrom(c).TenantID, name)
		if err != nil {
			return err
		}
		p, err := w.dashboard(c, &newKey{Key: k.Key, Prefix: k.Prefix, Name: name})
		if err != nil {
			return err
		}
		p.Notice = "New API key issued. Copy it now: it is shown only once."
		return w.render(c, http.StatusCreated, "dashboard", p)
	}
}

// handleDashboardRevokeKey revokes one of the session tenant's keys; another
// tenant's key id is a 404, whatever it is.
func (w *Web) handleDashboardRevokeKey() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Keys == nil {
			return apperr.New(apperr.NotFound, "revoking keys is not available here")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		if err := w.store.keyOwnedBy(ctx, id, sessionFrom(c).TenantID); err != nil {
			return err
		}
		if err := w.Keys.RevokeKey(ctx, id); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/dashboard?done=revoked")
	}
}

// upgrades are the plans that give at least as much of every meter the
// current plan limits, and more of one: the offers marked as upgrades.
func upgrades(plans []PlanRow, current string) []PlanRow {
	var cur *PlanRow
	for i := range plans {
		if plans[i].Key == current {
			cur = &plans[i]
		}
	}
	if cur == nil {
		return nil
	}
	limitOf := func(p PlanRow, meter string) (int64, bool) {
		for _, q := range p.Quotas {
			if q.Meter == meter {
				return q.Limit, true
			}
		}
		return 0, false // no quota: unlimited
	}
	var out []PlanRow
	for _, p := range plans {
		if p.Key == cur.Key {
			continue
		}
		atLeast, more := true, false
		for _, q := range cur.Quotas {
			l, limited := limitOf(p, q.Meter)
			switch {
			case !limited:
				more = true
			case l < q.Limit:
				atLeast = false
			case l > q.Limit:
				more = true
			}
		}
		if atLeast && more {
			out = append(out, p)
		}
	}
	return out
}
