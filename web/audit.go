package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// ctxNoChange marks a console POST that changed nothing (a confirmation
// page, a refused form): there is nothing to record.
const ctxNoChange = "web.nochange"

var errNoChange = errors.New("web: nothing changed")

// ctxTarget is the id of what a console POST created (an override, an API
// key), for its audit entry: "Why these limits" names who created each
// override.
const ctxTarget = "web.target"

// audited records the console action of a route audit.Routes declares,
// with its subject's state before and after; the actor is the session's
// credential name. Other routes pass through.
func (w *Web) audited(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		route, ok := audit.RouteOf(c.Request().Method, c.Path())
		if w.Audit == nil || !ok {
			return next(c)
		}
		sub := route.Subject(c.Param, c.FormValue)
		err := w.Audit.Do(c.Request().Context(), route.Action, sub, func() (audit.Subject, error) {
			if err := next(c); err != nil {
				return audit.Subject{}, err
			}
			if c.Response().Status >= 400 || c.Get(ctxNoChange) != nil {
				return audit.Subject{}, errNoChange
			}
			target, _ := c.Get(ctxTarget).(string)
			id := target
			switch {
			case route.ID != "" || route.Form != "":
			case route.Kind == audit.KindPlan:
				id = strings.TrimSpace(c.FormValue("key"))
			case route.Kind == audit.KindTenant:
				id = strings.TrimPrefix(c.Response().Header().Get("Location"), "/admin/tenants/")
				id, _, _ = strings.Cut(id, "?")
			}
			got := route.Created(id)
			if got.Target == "" {
				got.Target = target
			}
			return got, nil
		})
		if errors.Is(err, errNoChange) {
			return nil
		}
		return err
	}
}

// AuditRow is one entry as the console shows it.
type AuditRow struct {
	audit.Entry
	TenantName string
	Changes    []AuditChange
	// NoOp: the entry changed nothing but bookkeeping (a plan saved as it
	// was still bumps versions); Changes then holds that bookkeeping.
	NoOp bool
}

// AuditChange is one field that differs between before and after, by its
// path ("quotas.requests.limit"), each side as a person reads it (10,000;
// 31 Dec 2026 00:00 UTC; "added sso" for a list).
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
		r.NoOp = len(e.Before) > 0 && len(e.After) > 0 && isNoOp(r.Changes)
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

// isNoOp: only bookkeeping changed.
func isNoOp(changes []AuditChange) bool {
	for _, ch := range changes {
		if !bookkeeping[ch.Field] {
			return false
		}
	}
	return len(changes) > 0
}

// bookkeeping fields change on every save; alone they mean "no change".
var bookkeeping = map[string]bool{"entitlement_version": true, "version": true, "updated_at": true}

// maxChangeText bounds one side of a change: the column must stay
// readable, and the whole subject is in the API's audit trail.
const maxChangeText = 80

// diffJSON lists the fields of two JSON objects that differ, descending
// into nested objects, so that a plan edit reads "quotas.requests.limit:
// 1,000 → 2,000" rather than two dumps of the whole quotas object.
func diffJSON(before, after json.RawMessage) []AuditChange {
	var b, a map[string]any
	_ = json.Unmarshal(before, &b)
	_ = json.Unmarshal(after, &a)
	var out []AuditChange
	diffObjects("", b, a, &out)
	return out
}

func diffObjects(prefix string, b, a map[string]any, out *[]AuditChange) {
	keys := map[string]bool{}
	for k := range b {
		keys[k] = true
	}
	for k := range a {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		bv, bok := b[k]
		av, aok := a[k]
		bm, bIsMap := bv.(map[string]any)
		am, aIsMap := av.(map[string]any)
		switch {
		case bIsMap && aIsMap:
			diffObjects(prefix+k+".", bm, am, out)
		case bIsMap && !aok:
			diffObjects(prefix+k+".", bm, nil, out)
		case aIsMap && !bok:
			diffObjects(prefix+k+".", nil, am, out)
		default:
			if ch, ok := diffValue(prefix+k, bv, av); ok {
				*out = append(*out, ch)
			}
		}
	}
}

// diffValue compares two leaves. Lists of plain values say what was added
// and removed; other lists their length.
func diffValue(field string, b, a any) (AuditChange, bool) {
	bj, _ := json.Marshal(b)
	aj, _ := json.Marshal(a)
	if string(bj) == string(aj) {
		return AuditChange{}, false
	}
	bl, bList := b.([]any)
	al, aList := a.([]any)
	if (bList || b == nil) && (aList || a == nil) && (bList || aList) && plainList(bl) && plainList(al) {
		var added, removed []string
		has := func(l []any, v any) bool {
			for _, x := range l {
				if x == v {
					return true
				}
			}
			return false
		}
		for _, v := range al {
			if !has(bl, v) {
				added = append(added, humanValue(v))
			}
		}
		for _, v := range bl {
			if !has(al, v) {
				removed = append(removed, humanValue(v))
			}
		}
		if len(added) == 0 && len(removed) == 0 {
			return AuditChange{Field: field, Before: "same items", After: "reordered"}, true
		}
		return AuditChange{Field: field, Before: clip(listNote("removed", removed)), After: clip(listNote("added", added))}, true
	}
	return AuditChange{Field: field, Before: clip(humanValue(b)), After: clip(humanValue(a))}, true
}

func plainList(l []any) bool {
	for _, v := range l {
		switch v.(type) {
		case map[string]any, []any:
			return false
		}
	}
	return true
}

func listNote(what string, items []string) string {
	if len(items) == 0 {
		return "—"
	}
	return what + " " + strings.Join(items, ", ")
}

// humanValue writes a JSON value the way the rest of the console does:
// integers with thousands separators, timestamps as "31 Dec 2026 00:00
// UTC", nothing as "—", a list by its length.
func humanValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "—"
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return fmtTime(t)
		}
		if x == "" {
			return "—"
		}
		return x
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return numfmt.Int(int64(x))
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		if len(x) == 1 {
			return "1 item"
		}
		return numfmt.Int(int64(len(x))) + " items"
	case map[string]any:
		return numfmt.Int(int64(len(x))) + " fields"
	}
	return fmt.Sprint(v)
}

func clip(s string) string {
	if r := []rune(s); len(r) > maxChangeText {
		return string(r[:maxChangeText-1]) + "…"
	}
	return s
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
