package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// planForm is the plan form's fields as typed, so that a refused form comes
// back filled in.
type planForm struct {
	Key           string
	Name          string
	StripePriceID string
	RatePerSecond string
	RateBurst     string
	Concurrency   string
	Features      string // comma-separated
	Quotas        string // one "meter limit mode" per line
	QuotaWindow   string // "month" or "billing_period"
	Public        string // "true" (offered to tenants), "false" (internal); "" = unchanged, or true on create
}

func planFormOf(p PlanRow) planForm {
	f := planForm{Key: p.Key, Name: p.Name, StripePriceID: p.StripePriceID, Features: strings.Join(p.Features, ", "), QuotaWindow: p.QuotaWindow,
		Public: strconv.FormatBool(p.Public)}
	if p.RatePerSecond != nil {
		f.RatePerSecond = strconv.FormatFloat(*p.RatePerSecond, 'f', -1, 64)
	}
	if p.RateBurst != nil {
		f.RateBurst = strconv.FormatInt(*p.RateBurst, 10)
	}
	if p.Concurrency != nil {
		f.Concurrency = strconv.FormatInt(*p.Concurrency, 10)
	}
	lines := make([]string, 0, len(p.Quotas))
	for _, q := range p.Quotas {
		line := q.Meter + " " + strconv.FormatInt(q.Limit, 10) + " " + q.Mode
		if q.PerSeat {
			line += " per_seat"
		}
		lines = append(lines, line)
	}
	f.Quotas = strings.Join(lines, "\n")
	return f
}

func readPlanForm(c echo.Context) planForm {
	return planForm{
		Key:           strings.TrimSpace(c.FormValue("key")),
		Name:          strings.TrimSpace(c.FormValue("name")),
		StripePriceID: strings.TrimSpace(c.FormValue("stripe_price_id")),
		RatePerSecond: strings.TrimSpace(c.FormValue("rate_per_second")),
		RateBurst:     strings.TrimSpace(c.FormValue("rate_burst")),
		Concurrency:   strings.TrimSpace(c.FormValue("concurrency")),
		Features:      c.FormValue("features"),
		Quotas:        c.FormValue("quotas"),
		QuotaWindow:   strings.TrimSpace(c.FormValue("quota_window")),
		Public:        strings.TrimSpace(c.FormValue("public")),
	}
}

// input turns the form into the entitlements service's input; the service
// validates the values, this only parses them.
func (f planForm) input() (entitlements.PlanInput, error) {
	var v apperr.Validation
	in := entitlements.PlanInput{Key: f.Key, Name: f.Name, StripePriceID: f.StripePriceID, Quotas: map[string]*entitlements.QuotaInput{},
		QuotaWindow: f.QuotaWindow}
	if f.RatePerSecond != "" || f.RateBurst != "" {
		in.Rate = &entitlements.RateInput{}
		if f.RatePerSecond != "" {
			ps, err := strconv.ParseFloat(f.RatePerSecond, 64)
			if err != nil {
				v.Add("rate_per_second", "must be a number")
			}
			in.Rate.PerSecond = &ps
		}
		if f.RateBurst != "" {
			b, err := strconv.ParseInt(f.RateBurst, 10, 64)
			if err != nil {
				v.Add("rate_burst", "must be a whole number")
			}
			in.Rate.Burst = &b
		}
	}
	switch f.Public {
	case "":
	case "true", "false":
		in.Public = ptrTo(f.Public == "true")
	default:
		v.Add("public", `must be "true" (offered to tenants) or "false" (internal)`)
	}
	if f.Concurrency != "" {
		n, err := strconv.ParseInt(f.Concurrency, 10, 64)
		if err != nil {
			v.Add("concurrency", "must be a whole number")
		}
		in.Concurrency = &n
	}
	in.Features = []string{}
	for _, s := range strings.Split(f.Features, ",") {
		if s = strings.TrimSpace(s); s != "" {
			in.Features = append(in.Features, s)
		}
	}
	for i, line := range strings.Split(f.Quotas, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		perSeat := len(fields) > 2 && fields[len(fields)-1] == "per_seat"
		if perSeat {
			fields = fields[:len(fields)-1]
		}
		if len(fields) < 2 || len(fields) > 3 {
			v.Add("quotas", "line %d: write “meter limit [hard|soft] [per_seat]”, e.g. “requests 100000 hard”", i+1)
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			v.Add("quotas", "line %d: the limit %q is not a whole number", i+1, fields[1])
			continue
		}
		q := &entitlements.QuotaInput{Limit: &n, PerSeat: perSeat}
		if len(fields) == 3 {
			q.Mode = fields[2]
		}
		in.Quotas[fields[0]] = q
	}
	return in, v.Err()
}

type plansPage struct {
	Plans   []PlanRow
	Form    planForm
	Errors  []apperr.FieldError
	CanEdit bool
}

func (w *Web) renderPlans(c echo.Context, status int, f planForm, errs []apperr.FieldError, notice string) error {
	plans, err := w.store.plans(c.Request().Context())
	if err != nil {
		return err
	}
	return w.render(c, status, "admin_plans", page{Title: "Plans", Nav: "plans", Notice: notice,
		Data: plansPage{Plans: plans, Form: f, Errors: errs, CanEdit: w.PlanAdmin != nil}})
}

func (w *Web) handleAdminPlans() echo.HandlerFunc {
	return func(c echo.Context) error {
		return w.renderPlans(c, http.StatusOK, planForm{Quotas: "requests 10000 hard"}, nil, adminNotices[c.QueryParam("done")])
	}
}

// formError turns a validation error into the form's error list, so that
// the form is shown again with what was typed; other errors pass through.
func formError(err error) ([]apperr.FieldError, int, bool) {
	e, ok := apperr.As(err)
	if !ok || (e.Code != apperr.Invalid && e.Code != apperr.Conflict) {
		return nil, 0, false
	}
	fields := e.Fields
	if len(fields) == 0 {
		fields = []apperr.FieldError{{Message: e.Message}}
	}
	status := http.StatusBadRequest
	if e.Code == apperr.Conflict {
		status = http.StatusConflict
	}
	return fields, status, true
}

func (w *Web) handleAdminCreatePlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.PlanAdmin == nil {
			return apperr.New(apperr.NotFound, "plan editing is not available")
		}
		f := readPlanForm(c)
		in, err := f.input()
		if err == nil {
			_, err = w.PlanAdmin.CreatePlan(c.Request().Context(), in)
		}
		if fields, status, ok := formError(err); ok {
			return w.renderPlans(c, status, f, fields, "")
		}
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/plans/"+url.PathEscape(in.Key)+"?done=created")
	}
}

type planPage struct {
	Plan    PlanRow
	Form    planForm
	Errors  []apperr.FieldError
	CanEdit bool
}

func (w *Web) renderPlan(c echo.Context, status int, key string, f *planForm, errs []apperr.FieldError) error {
	p, err := w.store.plan(c.Request().Context(), key)
	if err != nil {
		return err
	}
	if f == nil {
		pf := planFormOf(p)
		f = &pf
	}
	return w.render(c, status, "admin_plan", page{Title: "Plan " + p.Name, Nav: "plans", Notice: adminNotices[c.QueryParam("done")],
		Data: planPage{Plan: p, Form: *f, Errors: errs, CanEdit: w.PlanAdmin != nil}})
}

func (w *Web) handleAdminPlan() echo.HandlerFunc {
	return func(c echo.Context) error { return w.renderPlan(c, http.StatusOK, c.Param("key"), nil, nil) }
}

// handleAdminEditPlan replaces the plan's fields with the form's: a meter
// left out of the quotas is removed from the plan.
func (w *Web) handleAdminEditPlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.PlanAdmin == nil {
			return apperr.New(apperr.NotFound, "plan editing is not available")
		}
		key := c.Param("key")
		f := readPlanForm(c)
		f.Key = key
		in, err := f.input()
		if err == nil {
			_, err = w.PlanAdmin.PatchPlan(c.Request().Context(), key, func(cur *entitlements.PlanInput) error {
				quotas := in.Quotas
				for m := range cur.Quotas {
					if _, ok := quotas[m]; !ok {
						quotas[m] = nil // removed
					}
				}
				for m, q := range in.Quotas {
					// Keep what the form does not show (the Stripe meter event
					// and what it is sent).
					if old, ok := cur.Quotas[m]; ok && old != nil && q != nil {
						q.StripeMeterEvent, q.StripeReport = old.StripeMeterEvent, old.StripeReport
					}
				}
				public := in.Public
				if public == nil {
					public = cur.Public // a form without the field leaves it as it was
				}
				*cur = entitlements.PlanInput{Key: key, Name: in.Name, StripePriceID: in.StripePriceID, Rate: in.Rate,
					Concurrency: in.Concurrency, Quotas: quotas, Features: in.Features, QuotaWindow: in.QuotaWindow, Public: public}
				return nil
			})
		}
		if fields, status, ok := formError(err); ok {
			return w.renderPlan(c, status, key, &f, fields)
		}
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/plans/"+url.PathEscape(key)+"?done=edited")
	}
}

func ptrTo[T any](v T) *T { return &v }
