package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/audit"
)

// ctxNoChange marks a console POST that changed nothing (a confirmation
// page, a refused form): there is nothing to record.
const ctxNoChange = "web.nochange"

var errNoChange = errors.New("web: nothing changed")

// ctxTarget is the id of what a console POST created (an override, an API
// key), for its audit entry: "Why these limits" names who created each
// override.
const ctxTarget = "web.target"

// audited records a console action in the audit trail, with its subject's
// state before and after; the actor is the session's credential name.
func (w *Web) audited(action string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if w.Audit == nil {
				return next(c)
			}
			var sub audit.Subject
			path := c.Path()
			switch {
			case strings.HasPrefix(path, "/admin/tenants/:id"):
				sub.TenantID = c.Param("id")
				sub.Target = c.Param("oid")
				if k := c.Param("key"); k != "" {
					sub.Target = k
				}
			case strings.HasPrefix(path, "/admin/plans/:key"):
				sub.PlanKey = c.Param("key")
			case strings.HasPrefix(path, "/admin/events/:id"):
				sub.EventID = c.Param("id")
			case strings.HasPrefix(path, "/admin/addons"):
				sub.AddonPriceID = c.Param("price")
				if path == "/admin/addons" {
					sub.AddonPriceID = strings.TrimSpace(c.FormValue("stripe_price_id"))
				}
				sub.Target = sub.AddonPriceID
			}
			err := w.Audit.Do(c.Request().Context(), action, sub, func() (audit.Subject, error) {
				if err := next(c); err != nil {
					return audit.Subject{}, err
				}
				if c.Response().Status >= 400 || c.Get(ctxNoChange) != nil {
					return audit.Subject{}, errNoChange
				}
				var got audit.Subject
				got.Target, _ = c.Get(ctxTarget).(string)
				switch path {
				case "/admin/plans":
					got.PlanKey = strings.TrimSpace(c.FormValue("key"))
				case "/admin/tenants":
					got.TenantID = strings.TrimPrefix(c.Response().Header().Get("Location"), "/admin/tenants/")
					got.TenantID, _, _ = strings.Cut(got.TenantID, "?")
				}
				return got, nil
			})
			if errors.Is(err, errNoChange) {
				return nil
			}
			return err
		}
	}
}

// AuditRow is one entry as the console shows it.
type AuditRow struct {
	audit.Entry
	TenantName string
	Changes    []AuditChange
}

// AuditChange is one top-level field that differs between before and after.
type AuditChange struct {
	Field  string
	Before string
	After  string
}

// auditRows adds tenant names and the fields that changed.
func (w *Web) auditRows(c echo.Context, es []audit.Entry) []AuditRow {
	names := map[string]string{}
	out := make([]AuditRow, 0, len(es))
	for _, e := range es {
		r := AuditRow{Entry: e, Changes: diffJSON(e.Before, e.After)}
		if e.TenantID != "" {
			if _, ok := names[e.TenantID]; !ok {
				t, err := w.store.tenant(c.Request().Context(), e.TenantID)
				if err == nil {
					names[e.TenantID] = t.Name
				} else {
					names[e.TenantID] = ""
				}
			}
			r.TenantName = names[e.TenantID]
		}
		out = append(out, r)
	}
	return out
}

// diffJSON lists the top-level fields of two JSON objects that differ.
func diffJSON(before, after json.RawMessage) []AuditChange {
	var b, a map[string]json.RawMessage
	_ = json.Unmarshal(before, &b)
	_ = json.Unmarshal(after, &a)
	keys := map[string]bool{}
	for k := range b {
		keys[k] = true
	}
	for k := range a {
		keys[k] = true
	}
	var out []AuditChange
	for _, k := range sortedKeys(keys) {
		bv, av := compact(b[k]), compact(a[k])
		if bv != av {
			out = append(out, AuditChange{Field: k, Before: bv, After: av})
		}
	}
	return out
}

func compact(v json.RawMessage) string {
	if len(v) == 0 {
		return "—"
	}
	var x any
	if json.Unmarshal(v, &x) != nil {
		return string(v)
	}
	if x == nil {
		return "—"
	}
	if s, ok := x.(string); ok {
		return s
	}
	out, _ := json.Marshal(x)
	return string(out)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

type auditPage struct {
	Tenant  string
	Plan    string
	Actor   string
	Rows    []AuditRow
	NextURL string
	Enabled bool
}

// handleAdminAudit is the console's audit page, filtered by tenant, plan
// and actor.
func (w *Web) handleAdminAudit() echo.HandlerFunc {
	return func(c echo.Context) error {
		d := auditPage{Tenant: strings.TrimSpace(c.QueryParam("tenant")), Plan: strings.TrimSpace(c.QueryParam("plan")),
			Actor: strings.TrimSpace(c.QueryParam("actor")), Enabled: w.Audit != nil}
		if w.Audit != nil {
			before, _ := strconv.ParseInt(c.QueryParam("before"), 10, 64)
			es, err := w.Audit.List(c.Request().Context(), audit.Filter{TenantID: d.Tenant, PlanKey: d.Plan, Actor: d.Actor, BeforeID: before, Limit: 50})
			if err != nil {
				return err
			}
			d.Rows = w.auditRows(c, es)
			if len(es) == 50 {
				v := url.Values{}
				for k, s := range map[string]string{"tenant": d.Tenant, "plan": d.Plan, "actor": d.Actor} {
					if s != "" {
						v.Set(k, s)
					}
				}
				v.Set("before", strconv.FormatInt(es[len(es)-1].ID, 10))
				d.NextURL = "/admin/audit?" + v.Encode()
			}
		}
		return w.render(c, http.StatusOK, "admin_audit", page{Title: "Audit trail", Nav: "audit", Data: d})
	}
}
