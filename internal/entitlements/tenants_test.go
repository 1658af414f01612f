package entitlements_test

import (
	"slices"
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

func TestCreateTenantErrors(t *testing.T) {
	b := setup(t)
	cus := uniq("cus")
	if _, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "A", Plan: b.free, StripeCustomerID: cus}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in    entitlements.TenantInput
		code  apperr.Code
		field string
	}{
		{entitlements.TenantInput{Name: "B", Plan: b.free, StripeCustomerID: cus}, apperr.Conflict, "stripe_customer_id"},
		{entitlements.TenantInput{Name: "B", Plan: "no-such-plan"}, apperr.Invalid, "plan"},
		{entitlements.TenantInput{Name: "B", Plan: "Bad Plan"}, apperr.Invalid, "plan"},
		{entitlements.TenantInput{Name: "  ", Plan: b.free}, apperr.Invalid, "name"},
		{entitlements.TenantInput{Name: "B", Plan: b.free, StripeCustomerID: "cus with space"}, apperr.Invalid, "stripe_customer_id"},
	}
	for _, tc := range cases {
		_, err := b.svc.CreateTenant(b.ctx, tc.in)
		if apperr.CodeOf(err) != tc.code || !slices.Equal(fieldsOf(err), []string{tc.field}) {
			t.Errorf("%+v: got %v, want %s on %s", tc.in, err, tc.code, tc.field)
		}
	}
	// Without a plan, the default plan.
	tn, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "C"})
	if err != nil || tn.Plan != b.free {
		t.Fatalf("default plan: %+v %v", tn, err)
	}
	got, err := b.svc.TenantByCustomer(b.ctx, cus)
	if err != nil || got.StripeCustomerID != cus {
		t.Fatalf("TenantByCustomer = %+v, %v", got, err)
	}
	if _, err := b.svc.TenantByCustomer(b.ctx, "cus_unknown"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown customer: %v", err)
	}
}

func TestListTenantsPagesAndSearch(t *testing.T) {
	b := setup(t)
	tag := uniq("zq")
	var ids []string
	for i := 0; i < 5; i++ {
		tn, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "Acme " + tag + " " + string(rune('a'+i)), Plan: b.free})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tn.ID)
	}
	if _, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "100%_" + tag, Plan: b.free}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	q := entitlements.ListQuery{Q: "ACME " + tag, Limit: 2}
	pages := 0
	for {
		page, err := b.svc.ListTenants(b.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, tn := range page.Tenants {
			seen = append(seen, tn.ID)
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	slices.Reverse(ids) // newest first
	if !slices.Equal(seen, ids) || pages != 3 {
		t.Fatalf("paged %v in %d pages, want %v in 3", seen, pages, ids)
	}
	// LIKE wildcards in q are literal.
	page, err := b.svc.ListTenants(b.ctx, entitlements.ListQuery{Q: "%_" + tag})
	if err != nil || len(page.Tenants) != 1 {
		t.Fatalf("wildcard search = %+v, %v", page, err)
	}
	for _, bad := range []entitlements.ListQuery{{Limit: 201}, {Limit: -1}, {Cursor: "garbage"}, {Cursor: "bm90LWEtY3Vyc29y"}} {
		if _, err := b.svc.ListTenants(b.ctx, bad); apperr.CodeOf(err) != apperr.Invalid {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
