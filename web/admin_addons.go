package web

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// addonForm is the add-on form as typed.
type addonForm struct {
	StripePriceID string
	Name          string
	Quotas        string // one "meter extra" per line
	Features      string // comma-separated
	MorePrices    string // more prices granting the same, one a line
	ProductID     string // every price of this product grants it
}

func readAddonForm(c echo.Context) addonForm {
	return addonForm{StripePriceID: strings.TrimSpace(c.FormValue("stripe_price_id")), Name: strings.TrimSpace(c.FormValue("name")),
		Quotas: c.FormValue("quotas"), Features: c.FormValue("features"), MorePrices: c.FormValue("stripe_price_ids"),
		ProductID: strings.TrimSpace(c.FormValue("stripe_product_id"))}
}

func (f addonForm) input() (catalogue.AddonInput, error) {
	var v apperr.Validation
	in := catalogue.AddonInput{Name: f.Name, Quotas: map[string]int64{}, Features: []string{}, StripePriceIDs: splitList(f.MorePrices),
		StripeProductID: f.ProductID}
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
		if len(fields) != 2 {
			v.Add("quotas", "line %d: write “meter extra”, e.g. “requests 10000”", i+1)
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			v.Add("quotas", "line %d: %q is not a whole number", i+1, fields[1])
			continue
		}
		in.Quotas[fields[0]] = n
	}
	return in, v.Err()
}

// addonRow is an add-on as the page lists it.
type addonRow struct {
	catalogue.Addon
	QuotaLines []string
}

type addonsPage struct {
	Addons  []addonRow
	Form    addonForm
	Errors  []apperr.FieldError
	CanEdit bool
}

func (w *Web) renderAddons(c echo.Context, status int, f addonForm, errs []apperr.FieldError, notice string) error {
	var rows []addonRow
	if w.Addons != nil {
		as, err := w.Addons.ListAddons(c.Request().Context())
		if err != nil {
			return err
		}
		for _, a := range as {
			r := addonRow{Addon: a}
			for m, n := range a.Quotas {
				r.QuotaLines = append(r.QuotaLines, m+" +"+numfmt.Int(n)) // 10,000 as everywhere
			}
			sort.Strings(r.QuotaLines)
			rows = append(rows, r)
		}
	}
	return w.render(c, status, "admin_addons", page{Title: "Add-ons", Nav: "addons", Notice: notice,
		Data: addonsPage{Addons: rows, Form: f, Errors: errs, CanEdit: w.Addons != nil}})
}

func (w *Web) handleAdminAddons() echo.HandlerFunc {
	return func(c echo.Context) error {
		return w.renderAddons(c, http.StatusOK, addonForm{} /* placeholders, not values (issue 28) */, nil, adminNotices[c.QueryParam("done")])
	}
}

// handleAdminPutAddon creates or replaces the grant of the form's price.
func (w *Web) handleAdminPutAddon() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Addons == nil {
			return apperr.New(apperr.NotFound, "add-on editing is not available")
		}
		f := readAddonForm(c)
		in, err := f.input()
		if err == nil {
			_, _, err = w.Addons.PutAddon(c.Request().Context(), f.StripePriceID, in)
		}
		if fields, status, ok := formError(err); ok {
			return w.renderAddons(c, status, f, fields, "")
		}
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/addons?done=addon")
	}
}

func (w *Web) handleAdminDeleteAddon() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Addons == nil {
			return apperr.New(apperr.NotFound, "add-on editing is not available")
		}
		if err := w.Addons.DeleteAddon(c.Request().Context(), c.Param("price")); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/addons?done=unaddon#"+url.QueryEscape(c.Param("price")))
	}
}
