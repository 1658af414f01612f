package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/numfmt"
)

func (w *Web) handleAdminLoginPage() echo.HandlerFunc {
	return func(c echo.Context) error {
		return w.render(c, http.StatusOK, "admin_login", page{Title: "Billing console login", CSRF: preToken(c, "/admin"),
			Data: loginPage{LoggedOut: c.QueryParam("out") != ""}})
	}
}

// handleAdminLogin checks the admin token in constant time and opens a
// console session.
func (w *Web) handleAdminLogin() echo.HandlerFunc {
	return func(c echo.Context) error {
		tok := strings.TrimSpace(c.FormValue("token"))
		who := w.adminName(tok)
		if who == "" {
			if err := w.guardFailed(c, "admin"); err != nil {
				return err
			}
			w.log.WarnContext(c.Request().Context(), "admin console login refused", "remote_ip", c.RealIP())
			return w.render(c, http.StatusUnauthorized, "admin_login", page{Title: "Billing console login", CSRF: preToken(c, "/admin"),
				Data: loginPage{Error: "That admin token is wrong."}})
		}
		// The session ends when the credential it was opened with is no
		// longer one of the admin tokens; its actions are recorded as who.
		raw, _, err := w.store.createSession(c.Request().Context(), kindAdmin, "", credential{adminHash: hashToken(tok), actor: who}, w.AdminTTL)
		if err != nil {
			return err
		}
		setCookie(c, cookieAdmin, raw, "/admin", int(w.AdminTTL.Seconds()))
		clearCookie(c, cookiePre, "/admin")
		return c.Redirect(http.StatusSeeOther, "/admin/tenants")
	}
}

// adminName returns the name of the admin credential tok is ("admin" for
// ADMIN_TOKEN), or "". Every credential is compared, in constant time.
func (w *Web) adminName(tok string) string {
	who := ""
	if equalConst(tok, w.AdminToken) {
		who = "admin"
	}
	for name, t := range w.AdminTokens {
		if equalConst(tok, t) {
			who = name
		}
	}
	return who
}

// adminHashes are the hashes of every valid admin token: a console session
// lives while the token that opened it is one of them.
func (w *Web) adminHashes() [][]byte {
	out := [][]byte{hashToken(w.AdminToken)}
	for _, t := range w.AdminTokens {
		out = append(out, hashToken(t))
	}
	return out
}

func (w *Web) handleAdminHome() echo.HandlerFunc {
	return func(c echo.Context) error { return c.Redirect(http.StatusSeeOther, "/admin/tenants") }
}

const tenantsPerPage = 25

type tenantsPage struct {
	CanCreate  bool
	Q          string
	Page       int
	Pages      int
	Total      int64
	Tenants    []TenantListRow
	PrevURL    string
	NextURL    string
	FirstShown int
	LastShown  int
}

func (w *Web) handleAdminTenants() echo.HandlerFunc {
	return func(c echo.Context) error {
		q := strings.TrimSpace(c.QueryParam("q"))
		if len(q) > 200 {
			q = q[:200]
		}
		pg, _ := strconv.Atoi(c.QueryParam("page"))
		pg = max(pg, 1)
		ctx := c.Request().Context()
		rows, total, err := w.store.tenantPage(ctx, q, pg, tenantsPerPage)
		if err != nil {
			return err
		}
		// The list shows what the tenant's page, the dashboard and
		// GET /v1/usage show: the same function, so overrides and usage
		// not yet flushed count here too (the plan's quota and the durable
		// figure alone said "332 / 100,000" where the override made 105,000).
		for i := range rows {
			u, err := w.Usage.Usage(ctx, rows[i].ID)
			if err != nil {
				w.log.WarnContext(ctx, "tenant list: usage failed", "tenant_id", rows[i].ID, "err", err)
				continue
			}
			rows[i].RequestLimit = nil
			for _, m := range u.Meters {
				if m.Meter == "requests" {
					rows[i].Requests, rows[i].RequestLimit = m.Used, m.Limit
				}
			}
		}
		d := tenantsPage{CanCreate: w.Tenants != nil, Q: q, Page: pg, Total: total, Tenants: rows,
			Pages: max(int((total+tenantsPerPage-1)/tenantsPerPage), 1)}
		link := func(n int) string {
			v := url.Values{}
			if q != "" {
				v.Set("q", q)
			}
			v.Set("page", strconv.Itoa(n))
			return "/admin/tenants?" + v.Encode()
		}
		if pg > 1 {
			d.PrevURL = link(pg - 1)
		}
		if pg < d.Pages {
			d.NextURL = link(pg + 1)
		}
		if len(rows) > 0 {
			d.FirstShown, d.LastShown = (pg-1)*tenantsPerPage+1, (pg-1)*tenantsPerPage+len(rows)
		}
		return w.render(c, http.StatusOK, "admin_tenants", page{Title: "Tenants", Nav: "tenants", Data: d})
	}
}

// tenantPage is the data of the console's tenant page.
type tenantPage struct {
	UsageView
	Keys      []KeyRow
	Overrides []OverrideRow
	Plans     []PlanRow
	Events    []EventRow
	Versions  []VersionRow
	Drift     []DriftRow
	OtherSubs []OtherSubRow // overlapping and add-on-only subscriptions
	NewKey    *newKey
	NewLink   *newLink
	CanPlan   bool
	CanKeys   bool
	CanOver   bool
	CanResync bool
	OverForm  overrideForm
	OverErrs  []apperr.FieldError
	// Grants are the tenant's credit grants, active and past (nil
	// without a GrantManager).
	Grants    []credits.Grant
	CanGrant  bool
	GrantForm grantForm
	GrantErrs []apperr.FieldError
	CanEdit   bool   // the external id form
	ExtForm   string // the external id as typed, after a refusal
	ExtErr    string // why it was refused
	ExtTaken  *tenantLink
	Audit     []AuditRow // the tenant's own trail, newest first
	Why       *whyPanel  // "Why these limits"; nil without an Explainer
}

type newLink struct {
	URL       string
	ExpiresAt time.Time
}

func (w *Web) adminTenant(c echo.Context) (page, tenantPage, error) {
	ctx := c.Request().Context()
	id := c.Param("id")
	u, err := w.usageView(ctx, id)
	if err != nil {
		return page{}, tenantPage{}, err
	}
	d := tenantPage{UsageView: u, CanPlan: w.Plans != nil, CanKeys: w.Keys != nil, CanOver: w.Overrides != nil, CanResync: w.Resyncer != nil, CanEdit: w.Tenants != nil, CanGrant: w.Grants != nil}
	if d.Keys, err = w.store.keys(ctx, id); err != nil {
		return page{}, d, err
	}
	if d.Overrides, err = w.store.overrides(ctx, id); err != nil {
		return page{}, d, err
	}
	if w.Grants != nil {
		if d.Grants, err = w.grantsOf(ctx, id); err != nil {
			return page{}, d, err
		}
	}
	if d.Plans, err = w.store.plans(ctx); err != nil {
		return page{}, d, err
	}
	if d.Events, err = w.store.events(ctx, id, 10); err != nil {
		return page{}, d, err
	}
	if d.Versions, err = w.store.versions(ctx, id, 10); err != nil {
		return page{}, d, err
	}
	if d.Drift, err = w.store.drift(ctx, id, 10); err != nil {
		return page{}, d, err
	}
	if d.OtherSubs, err = w.store.otherSubscriptions(ctx, id); err != nil {
		return page{}, d, err
	}
	if d.Why, err = w.explainTenant(ctx, id); err != nil {
		return page{}, d, err
	}
	if w.Audit != nil {
		es, err := w.Audit.List(ctx, audit.Filter{TenantID: id, Limit: 20})
		if err != nil {
			return page{}, d, err
		}
		d.Audit = w.auditRows(c, es)
	}
	return page{Title: u.Tenant.Name, Nav: "tenants"}, d, nil
}

var adminNotices = map[string]string{
	"plan":     "Plan changed. The tenant's new limits are in force.",
	"tenant":   "Tenant created.",
	"revoked":  "API key revoked.",
	"override": "Override saved; it applies through a new entitlement version.",
	"deleted":  "Override removed.",
	"granted":  "Grant issued.",
	"voided":   "Grant voided: nothing more is drawn from it.",
	"replayed": "Event queued for replay.",
	"created":  "Plan created.",
	"edited":   "Plan saved; every tenant on it has the new limits.",
	"addon":    "Add-on saved; tenants with it have the new limits.",
	"unaddon":  "Add-on removed.",
	"external": "External id saved; limiters see it within a second.",
}

func (w *Web) handleAdminTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		p, d, err := w.adminTenant(c)
		if err != nil {
			return err
		}
		p.Notice, p.Data = adminNotices[c.QueryParam("done")], d
		return w.render(c, http.StatusOK, "admin_tenant", p)
	}
}

func (w *Web) handleAdminChangePlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Plans == nil {
			return apperr.New(apperr.NotFound, "plan changes are not available")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		t, err := w.store.tenant(ctx, id)
		if err != nil {
			return err
		}
		plan := strings.TrimSpace(c.FormValue("plan"))
		if plan == "" {
			return apperr.Invalidf("plan", "choose a plan")
		}
		if !confirmed(c) {
			return w.confirmPlanChange(c, t, plan)
		}
		if _, err := w.Plans.ChangePlan(ctx, id, plan); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/tenants/"+id+"?done=plan")
	}
}

// confirmPlanChange shows the tenant's limits now and on the new plan, and
// the meters whose usage already reaches a new hard limit.
func (w *Web) confirmPlanChange(c echo.Context, t TenantRow, plan string) error {
	d := confirmPage{
		Heading: "Change the plan of " + t.Name + "?",
		Lead:    t.Name + " goes from plan " + t.PlanKey + " to plan " + plan + "; its new limits apply at once.",
		Action:  "/admin/tenants/" + t.ID + "/plan",
		Button:  "Change plan to " + plan,
		Cancel:  "/admin/tenants/" + t.ID,
	}
	if t.SubStatus != "" {
		d.Lead += " The tenant has a Stripe subscription: with Stripe configured its price is swapped (with proration) first."
	}
	if w.Previews != nil {
		e, err := w.Previews.PreviewPlanChange(c.Request().Context(), t.ID, plan)
		if err != nil {
			return err
		}
		used, err := w.usedByMeter(c, t.ID)
		if err != nil {
			return err
		}
		d.Limits = diffLimits(snapshotLimits(e.Before), snapshotLimits(e.After), used)
		if anyOver(d.Limits) {
			d.Warning = "Usage this period already reaches a new hard limit: the tenant's requests on those meters are refused from the moment of the change until the period resets."
		}
		if e.After.Plan != plan {
			d.Lead += " Its subscription status keeps it on plan " + e.After.Plan + " for now."
		}
	}
	return w.renderConfirm(c, "Confirm plan change", d)
}

func (w *Web) handleAdminIssueKey() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Keys == nil {
			return apperr.New(apperr.NotFound, "issuing keys is not available")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		if _, err := w.store.tenant(ctx, id); err != nil {
			return err
		}
		name := strings.TrimSpace(c.FormValue("name"))
		if len(name) > 200 {
			return apperr.Invalidf("name", "must be at most 200 characters")
		}
		k, err := w.Keys.IssueKey(ctx, id, name)
		if err != nil {
			return err
		}
		c.Set(ctxTarget, k.ID) // the audit entry names the key by its id, as the API's does
		p, d, err := w.adminTenant(c)
		if err != nil {
			return err
		}
		d.NewKey = &newKey{Key: k.Key, Prefix: k.Prefix, Name: name}
		p.Notice, p.Data = "API key issued. Copy it now: it is shown only once.", d
		return w.render(c, http.StatusCreated, "admin_tenant", p)
	}
}

func (w *Web) handleAdminRevokeKey() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Keys == nil {
			return apperr.New(apperr.NotFound, "revoking keys is not available")
		}
		ctx := c.Request().Context()
		id, key := c.Param("id"), c.Param("key")
		if !ids.IsUUID(id) {
			return apperr.New(apperr.NotFound, "tenant not found")
		}
		k, sessions, err := w.store.keyWithSessions(ctx, key, id)
		if err != nil {
			return err
		}
		if !confirmed(c) {
			return w.confirmRevoke(c, id, k, sessions)
		}
		if err := w.Keys.RevokeKey(ctx, key); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/tenants/"+id+"?done=revoked#keys")
	}
}

// confirmRevoke shows the key, its last use and the dashboard sessions the
// revocation ends.
func (w *Web) confirmRevoke(c echo.Context, tenantID string, k KeyRow, sessions int64) error {
	t, err := w.store.tenant(c.Request().Context(), tenantID)
	if err != nil {
		return err
	}
	last := "never"
	if k.LastUsedAt != nil {
		last = fmtTime(*k.LastUsedAt)
	}
	name := k.Name
	if name == "" {
		name = "—"
	}
	d := confirmPage{
		Heading: "Revoke key " + k.Prefix + "… of " + t.Name + "?",
		Lead:    "Every request with this key is refused (401) at once, on every instance. A revoked key cannot be restored; the tenant needs a new one.",
		Action:  "/admin/tenants/" + tenantID + "/keys/" + k.ID + "/revoke",
		Button:  "Revoke key " + k.Prefix + "…",
		Cancel:  "/admin/tenants/" + tenantID + "#keys",
		Facts: []fact{{"Key", k.Prefix + "…"}, {"Name", name}, {"Created", fmtTime(k.CreatedAt)}, {"Last used", last},
			{"Dashboard sessions it ends", numfmt.Int(sessions)}},
	}
	if k.RevokedAt != nil {
		d.Warning = "This key was already revoked on " + fmtTime(*k.RevokedAt) + "; confirming changes nothing."
	}
	return w.renderConfirm(c, "Confirm key revocation", d)
}

// handleAdminMintLink makes a dashboard link and shows it on the tenant's
// page, for the admin to send to the tenant.
func (w *Web) handleAdminMintLink() echo.HandlerFunc {
	return func(c echo.Context) error {
		u, exp, err := w.MintLink(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		p, d, err := w.adminTenant(c)
		if err != nil {
			return err
		}
		if strings.HasPrefix(u, "/") { // no PUBLIC_URL: the host this page was asked on
			u = w.publicBase(c) + u
		}
		d.NewLink = &newLink{URL: u, ExpiresAt: exp}
		p.Notice, p.Data = "Dashboard link made. It works once, until "+fmtTime(exp)+".", d
		return w.render(c, http.StatusCreated, "admin_tenant", p)
	}
}

func (w *Web) handleAdminDrift() echo.HandlerFunc {
	return func(c echo.Context) error {
		rows, err := w.store.drift(c.Request().Context(), "", 200)
		if err != nil {
			return err
		}
		return w.render(c, http.StatusOK, "admin_drift", page{Title: "Drift repairs", Nav: "drift", Data: rows})
	}
}

// handleAdminResync re-reads the tenant's Stripe customer now (the periodic
// resync does the same for everyone) and shows what it repaired.
func (w *Web) handleAdminResync() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Resyncer == nil {
			return apperr.New(apperr.NotFound, "resync is not available")
		}
		repairs, err := w.Resyncer.ResyncTenant(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		p, d, err := w.adminTenant(c)
		if err != nil {
			return err
		}
		p.Data = d
		switch len(repairs) {
		case 0:
			p.Notice = "Resynced with Stripe: nothing differed."
		case 1:
			p.Notice = "Resynced with Stripe: 1 field repaired (see Drift repaired)."
		default:
			p.Notice = "Resynced with Stripe: " + strconv.Itoa(len(repairs)) + " fields repaired (see Drift repaired)."
		}
		return w.render(c, http.StatusOK, "admin_tenant", p)
	}
}
