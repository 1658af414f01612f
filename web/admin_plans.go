package web

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// planForm is the plan form's fields as typed, so that a refused form comes
// back filled in.
type planForm struct {
	Key  string
	Name string
	// StripePriceIDs are the plan's prices, one per line or comma-separated
	// (the first is the self-serve default); StripeProductID maps every
	// price of a product.
	StripePriceIDs  string
	StripeProductID string
	RatePerSecond   string
	RateBurst       string
	Concurrency     string
	Features        string // comma-separated
	QuotaWindow     string // "month" or "billing_period"
	Public          string // "true" (offered to tenants), "false" (internal); "" = unchanged, or true on create
	// Rows are the quota editor's rows, blank ones included.
	Rows []quotaRow
	// Windows are the window editor's rows, blank ones included;
	// windowIdx maps the service's window j to its row (windowInputs).
	Windows       []windowRow
	windowIdx     []int
	windowsPosted bool
}

// quotaRow is one row of the quota editor: a meter's limit and mode. Its
// fields are posted as quotas[i].meter, quotas[i].limit, quotas[i].mode,
// quotas[i].per_seat, quotas[i].notify and quotas[i].remove, so that an
// error names its row.
type quotaRow struct {
	Meter   string
	Limit   string
	Mode    string
	PerSeat bool
	// Notify are the webhook thresholds as typed ("50%, 80%, 5000 units");
	// empty = the defaults. notifyPosted is false for a form without the
	// field (an older page, a script): an edit then keeps the plan's.
	Notify       string
	notifyPosted bool
	Remove       bool
	Errors       []string // what is wrong with the row, shown next to it
}

// blank reports whether the row was left empty (the spare rows).
func (r quotaRow) blank() bool { return r.Meter == "" && r.Limit == "" }

const (
	// spareRows are the empty rows under a plan's quotas: room to add
	// meters without JavaScript; "More rows" adds moreRows each time.
	spareRows = 2
	moreRows  = 3
	// maxQuotaRows bounds the rows read from a form (the service allows
	// 100 meters).
	maxQuotaRows = 120
)

var meterRe = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

func planFormOf(p PlanRow) planForm {
	f := planForm{Key: p.Key, Name: p.Name, StripePriceIDs: strings.Join(p.StripePriceIDs, "\n"), StripeProductID: p.StripeProductID, Features: strings.Join(p.Features, ", "), QuotaWindow: p.QuotaWindow,
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
	for _, q := range p.Quotas {
		f.Rows = append(f.Rows, quotaRow{Meter: q.Meter, Limit: strconv.FormatInt(q.Limit, 10), Mode: q.Mode, PerSeat: q.PerSeat,
			Notify: formatThresholds(q.Notify), notifyPosted: true})
	}
	f.Windows = windowRowsOf(p.Windows)
	return f.withSpareRows(spareRows)
}

// withSpareRows adds n empty quota rows and spareWindowRows window rows.
func (f planForm) withSpareRows(n int) planForm {
	for range n {
		f.Rows = append(f.Rows, quotaRow{Mode: "hard"})
	}
	for range spareWindowRows {
		f.Windows = append(f.Windows, windowRow{Kind: catalogue.WindowSliding})
	}
	return f
}

func readPlanForm(c echo.Context) planForm {
	f := planForm{
		Key:             strings.TrimSpace(c.FormValue("key")),
		Name:            strings.TrimSpace(c.FormValue("name")),
		StripePriceIDs:  c.FormValue("stripe_price_ids"),
		StripeProductID: strings.TrimSpace(c.FormValue("stripe_product_id")),
		RatePerSecond:   strings.TrimSpace(c.FormValue("rate_per_second")),
		RateBurst:       strings.TrimSpace(c.FormValue("rate_burst")),
		Concurrency:     strings.TrimSpace(c.FormValue("concurrency")),
		Features:        c.FormValue("features"),
		QuotaWindow:     strings.TrimSpace(c.FormValue("quota_window")),
		Public:          strings.TrimSpace(c.FormValue("public")),
	}
	if strings.TrimSpace(f.StripePriceIDs) == "" {
		f.StripePriceIDs = c.FormValue("stripe_price_id") // the one-price form of older scripts
	}
	n, _ := strconv.Atoi(c.FormValue("quota_rows"))
	for i := range min(max(n, 0), maxQuotaRows) {
		name := func(field string) string { return "quotas[" + strconv.Itoa(i) + "]." + field }
		f.Rows = append(f.Rows, quotaRow{
			Meter:   strings.TrimSpace(c.FormValue(name("meter"))),
			Limit:   strings.TrimSpace(c.FormValue(name("limit"))),
			Mode:    strings.TrimSpace(c.FormValue(name("mode"))),
			PerSeat: c.FormValue(name("per_seat")) != "",
			Remove:  c.FormValue(name("remove")) != "",
			Notify:  strings.TrimSpace(c.FormValue(name("notify"))),
		})
		_, f.Rows[len(f.Rows)-1].notifyPosted = c.Request().Form[name("notify")]
	}
	f.Windows, f.windowsPosted = readWindowRows(c)
	return f
}

// input turns the form into the entitlements service's input; the service
// validates the values, this only parses them. Each quota row is checked on
// its own, and a bad one is named by its row (quotas[2].limit).
func (f *planForm) input() (catalogue.PlanInput, error) {
	var v apperr.Validation
	in := catalogue.PlanInput{Key: f.Key, Name: f.Name, StripePriceIDs: splitList(f.StripePriceIDs), StripeProductID: f.StripeProductID,
		Quotas:      map[string]*catalogue.QuotaInput{},
		QuotaWindow: f.QuotaWindow}
	if f.RatePerSecond != "" || f.RateBurst != "" {
		in.Rate = &catalogue.RateInput{}
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
	seen := map[string]int{}
	for i := range f.Rows {
		r := &f.Rows[i]
		r.Errors = nil
		if r.Remove || r.blank() {
			continue
		}
		bad := func(field, format string, args ...any) {
			msg := fmt.Sprintf("row %d: ", i+1) + fmt.Sprintf(format, args...)
			v.Add("quotas["+strconv.Itoa(i)+"]."+field, "%s", msg)
			r.Errors = append(r.Errors, msg)
		}
		if !meterRe.MatchString(r.Meter) {
			bad("meter", "the meter name must be 1-64 of a-z, 0-9, _ . and -")
		} else if j, dup := seen[r.Meter]; dup {
			bad("meter", "%s is already in row %d", r.Meter, j+1)
		} else {
			seen[r.Meter] = i
		}
		n, err := strconv.ParseInt(r.Limit, 10, 64)
		if err != nil || n < 0 {
			bad("limit", "the limit must be a whole number, 0 or more")
		}
		if r.Mode != "hard" && r.Mode != "soft" {
			bad("mode", "the mode must be hard or soft")
		}
		notify, err := parseThresholds(r.Notify)
		if err != nil {
			bad("notify", "%s", err.Error())
		}
		if len(r.Errors) == 0 {
			in.Quotas[r.Meter] = &catalogue.QuotaInput{Limit: &n, Mode: r.Mode, PerSeat: r.PerSeat, Notify: notify}
		}
	}
	in.Windows = f.windowInputs(&v)
	return in, v.Err()
}

// rowErrors puts the service's field errors on quotas (quotas.<meter>.limit)
// next to the row of that meter, and names the row in the field.
func (f *planForm) rowErrors(fields []apperr.FieldError) []apperr.FieldError {
	out := make([]apperr.FieldError, 0, len(fields))
	for _, fe := range fields {
		fe = f.windowErrors(fe)
		rest, ok := strings.CutPrefix(fe.Field, "quotas.")
		if ok {
			for i := range f.Rows {
				r := &f.Rows[i]
				if r.Remove || r.Meter == "" || (rest != r.Meter && !strings.HasPrefix(rest, r.Meter+".")) {
					continue
				}
				sub := strings.TrimPrefix(strings.TrimPrefix(rest, r.Meter), ".")
				if sub == "" {
					sub = "meter"
				}
				fe.Field = "quotas[" + strconv.Itoa(i) + "]." + sub
				fe.Message = fmt.Sprintf("row %d: %s", i+1, fe.Message)
				r.Errors = append(r.Errors, fe.Message)
				break
			}
		}
		out = append(out, fe)
	}
	return out
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
		// Empty rows with placeholders (issue 28): a prefilled
		// "requests 10000" was saved as a real quota by whoever did not
		// notice it.
		f := planForm{}.withSpareRows(spareRows + 1)
		return w.renderPlans(c, http.StatusOK, f, nil, adminNotices[c.QueryParam("done")])
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
		if c.FormValue("more") != "" {
			c.Set(ctxNoChange, true)
			return w.renderPlans(c, http.StatusOK, f.withSpareRows(moreRows), nil, "")
		}
		in, err := f.input()
		if err == nil {
			_, err = w.PlanAdmin.CreatePlan(c.Request().Context(), in)
		}
		if fields, status, ok := formError(err); ok {
			return w.renderPlans(c, status, f, f.rowErrors(fields), "")
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
// left out of the quotas (or whose row is ticked "remove") is removed from
// the plan. The edit reaches every tenant on the plan, so it is first shown
// as a confirmation with the limits before and after and the tenants it
// changes; only the confirm form saves it.
func (w *Web) handleAdminEditPlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.PlanAdmin == nil {
			return apperr.New(apperr.NotFound, "plan editing is not available")
		}
		ctx := c.Request().Context()
		key := c.Param("key")
		f := readPlanForm(c)
		f.Key = key
		if c.FormValue("more") != "" {
			c.Set(ctxNoChange, true)
			more := f.withSpareRows(moreRows)
			return w.renderPlan(c, http.StatusOK, key, &more, nil)
		}
		in, err := f.input()
		notifyPosted := map[string]bool{}
		for _, r := range f.Rows {
			notifyPosted[r.Meter] = r.notifyPosted
		}
		patch := func(cur *catalogue.PlanInput) error {
			quotas := maps.Clone(in.Quotas)
			for m := range cur.Quotas {
				if _, ok := quotas[m]; !ok {
					quotas[m] = nil // removed
				}
			}
			for m, q := range quotas {
				// Keep what the form does not show (the Stripe meter event,
				// what it is sent, the rollover, the unit price), and the
				// webhook thresholds when the form had no field for them.
				if old, ok := cur.Quotas[m]; ok && old != nil && q != nil {
					qq := *q
					qq.StripeMeterEvent, qq.StripeReport, qq.Rollover = old.StripeMeterEvent, old.StripeReport, old.Rollover
					qq.UnitAmountDecimal, qq.Currency = old.UnitAmountDecimal, old.Currency
					if !notifyPosted[m] {
						qq.Notify = old.Notify
					}
					quotas[m] = &qq
				}
			}
			windows := in.Windows
			if windows == nil {
				windows = cur.Windows // a form without the window editor leaves them
			}
			public := in.Public
			if public == nil {
				public = cur.Public // a form without the field leaves it as it was
			}
			// Price pins are not on the form: they stay as they are.
			*cur = catalogue.PlanInput{Key: key, Name: in.Name, StripePriceIDs: in.StripePriceIDs, StripeProductID: in.StripeProductID, PriceVersions: cur.PriceVersions, Rate: in.Rate,
				Concurrency: in.Concurrency, Quotas: quotas, Features: in.Features, QuotaWindow: in.QuotaWindow, Public: public,
				Windows: windows}
			return nil
		}
		if err == nil && !confirmed(c) && w.Previews != nil {
			var e catalogue.PlanEffect
			if e, err = w.PlanAdmin.PreviewPlanPatch(ctx, key, patch); err == nil {
				return w.confirmPlanEdit(c, e)
			}
		}
		if err == nil && !confirmed(c) {
			return w.confirmPlanEdit(c, catalogue.PlanEffect{})
		}
		if err == nil {
			_, err = w.PlanAdmin.PatchPlan(ctx, key, patch)
		}
		if fields, status, ok := formError(err); ok {
			return w.renderPlan(c, status, key, &f, f.rowErrors(fields))
		}
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/plans/"+url.PathEscape(key)+"?done=edited")
	}
}

func ptrTo[T any](v T) *T { return &v }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// tenantsListed is how many affected tenants a confirmation names.
const tenantsListed = 20

// confirmPlanEdit shows the plan's limits before and after and the tenants
// whose limits change.
func (w *Web) confirmPlanEdit(c echo.Context, e catalogue.PlanEffect) error {
	key := c.Param("key")
	d := confirmPage{
		Heading: "Save plan " + key + "?",
		Action:  "/admin/plans/" + url.PathEscape(key),
		Button:  "Save plan " + key,
		Cancel:  "/admin/plans/" + url.PathEscape(key),
	}
	if e.After.Key == "" { // no previews on this server
		d.Lead = "Every tenant on the plan gets the new limits at once."
		return w.renderConfirm(c, "Confirm plan edit", d)
	}
	n := len(e.Tenants)
	switch n {
	case 0:
		d.Lead = "No tenant is on this plan: saving changes nobody's limits."
	case 1:
		d.Lead = "Saving changes the limits of 1 tenant at once."
	default:
		d.Lead = "Saving changes the limits of " + numfmt.Int(int64(n)) + " tenants at once."
	}
	for _, r := range diffLimits(planLimits(e.Before), planLimits(e.After), nil) {
		if r.Name != "Plan" {
			d.Limits = append(d.Limits, r)
		}
	}
	for _, r := range []limitChange{
		{Name: "Name", Before: e.Before.Name, After: e.After.Name},
		{Name: "Stripe prices", Before: strings.Join(e.Before.StripePriceIDs, ", "), After: strings.Join(e.After.StripePriceIDs, ", ")},
		{Name: "Stripe product", Before: e.Before.StripeProductID, After: e.After.StripeProductID},
		{Name: "Features", Before: strings.Join(e.Before.Features, ", "), After: strings.Join(e.After.Features, ", ")},
		{Name: "Quotas reset", Before: e.Before.QuotaWindow, After: e.After.QuotaWindow},
		{Name: "Offered to tenants", Before: yesNo(e.Before.Public), After: yesNo(e.After.Public)},
	} {
		if r.Before != r.After {
			r.Changed = true
			d.Limits = append(d.Limits, r)
		}
	}
	if n > 0 {
		names, err := w.store.tenantNames(c.Request().Context(), e.Tenants, tenantsListed)
		if err != nil {
			return err
		}
		d.Tenants, d.More = names, n-len(names)
	}
	return w.renderConfirm(c, "Confirm plan edit", d)
}

// splitList reads ids one per line or comma-separated.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' || r == ' ' || r == '\t' })
}
