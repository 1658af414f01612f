package web

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// The new-plan and add-on forms show placeholders, never real values a
// hurried admin would save (issue 28): every input and textarea of the two
// forms starts empty, and each has a placeholder.
func TestConsoleNewPlanAndAddonFormsHavePlaceholdersNotValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br, _ := b.adminBrowser(t)
	value := regexp.MustCompile(`<(input|textarea)[^>]*name="([^"]+)"[^>]*>`)
	for path, form := range map[string]string{"/admin/plans": `action="/admin/plans"`, "/admin/addons": `action="/admin/addons"`} {
		page := br.get(path)
		wantStatus(t, page, http.StatusOK, path)
		body := page.body[strings.Index(page.body, form):]
		body = body[:strings.Index(body, "</form>")]
		for _, m := range value.FindAllStringSubmatch(body, -1) {
			tag, name := m[0], m[2]
			if name == "csrf" || name == "quota_rows" || strings.Contains(tag, `type="checkbox"`) || strings.Contains(tag, `type="hidden"`) {
				continue
			}
			if strings.Contains(tag, `value="`) && !strings.Contains(tag, `value=""`) {
				t.Errorf("%s: %s is prefilled: %s", path, name, tag)
			}
			if !strings.Contains(tag, "placeholder=") && name != "key" {
				t.Errorf("%s: %s has no placeholder: %s", path, name, tag)
			}
		}
		if strings.Contains(body, ">requests 10000<") {
			t.Errorf("%s: a textarea is prefilled", path)
		}
	}
}

// The plan form takes several Stripe prices (one a line) and a product.
func TestConsolePlanFormTakesSeveralPricesAndAProduct(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br, tok := b.adminBrowser(t)
	key := uniq("multi")
	form := url.Values{"csrf": {tok}, "key": {key}, "stripe_price_ids": {"price_m_" + key + "\nprice_y_" + key}, "stripe_product_id": {"prod_" + key}}
	quotaRows(form, "requests 5000 hard")
	wantRedirect(t, br.post("/admin/plans", form), "/admin/plans/"+key+"?done=created", "create plan")
	p, err := b.cat.GetPlan(b.ctx, key)
	if err != nil || !slices.Equal(p.StripePriceIDs, []string{"price_m_" + key, "price_y_" + key}) || p.StripeProductID != "prod_"+key {
		t.Fatalf("created plan %+v, %v", p, err)
	}
	page := br.get("/admin/plans/" + key)
	wantIn(t, page.body, "price_m_"+key+"\nprice_y_"+key, `value="prod_`+key+`"`)
	// A console edit keeps what its form does not show: the price pins.
	if _, err := b.cat.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error {
		in.PriceVersions = map[string]int64{"price_y_" + key: 1}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	edit := quotaRows(url.Values{"csrf": {tok}, "confirm": {"1"}, "stripe_price_ids": {"price_m_" + key + "\nprice_y_" + key}}, "requests 6000 hard")
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "edit plan")
	if p, _ := b.cat.GetPlan(b.ctx, key); p.PriceVersions["price_y_"+key] != 1 || p.Quotas["requests"].Limit != 6000 {
		t.Fatalf("after a console edit: pins %v, requests %d", p.PriceVersions, p.Quotas["requests"].Limit)
	}
	other := url.Values{"csrf": {tok}, "key": {uniq("dup")}, "stripe_price_ids": {"price_y_" + key}}
	quotaRows(other, "requests 5 hard")
	r := br.post("/admin/plans", other)
	wantStatus(t, r, http.StatusConflict, "a price mapped twice")
	wantIn(t, r.body, "price_y_"+key+" is already mapped to plan "+key)
}
