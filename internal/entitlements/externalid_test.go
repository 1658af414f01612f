package entitlements_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
)

func extPtr(s string) *string { return &s }

func TestExternalIDCreateFindAndErrors(t *testing.T) {
	b := setup(t)
	ext := uniq("Acme:42@eu.x_y")
	tn, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "Acme", Plan: b.free, ExternalID: ext})
	if err != nil || tn.ExternalID == nil || *tn.ExternalID != ext {
		t.Fatalf("create: %+v %v", tn, err)
	}
	got, err := b.svc.TenantByExternalID(b.ctx, ext)
	if err != nil || got.ID != tn.ID {
		t.Fatalf("TenantByExternalID = %+v, %v", got, err)
	}
	// Case-sensitive: the upper-case id is another (unknown) one, and may be taken.
	if _, err := b.svc.TenantByExternalID(b.ctx, strings.ToUpper(ext)); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("upper-case lookup: %v", err)
	}
	if _, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "ACME", Plan: b.free, ExternalID: strings.ToUpper(ext)}); err != nil {
		t.Fatalf("upper-case external id is its own: %v", err)
	}
	for _, q := range []entitlements.ListQuery{{ExternalID: ext}, {Q: ext}} {
		page, err := b.svc.ListTenants(b.ctx, q)
		if err != nil || len(page.Tenants) != 1 || page.Tenants[0].ID != tn.ID {
			t.Fatalf("list %+v: %+v %v", q, page, err)
		}
	}
	if _, err := b.svc.ListTenants(b.ctx, entitlements.ListQuery{ExternalID: "bad id"}); !slices.Equal(fieldsOf(err), []string{"external_id"}) {
		t.Fatalf("list by a bad external id: %v", err)
	}
	cases := []struct {
		ext  string
		code apperr.Code
	}{
		{ext, apperr.Conflict},
		{"has space", apperr.Invalid},
		{"{tag}", apperr.Invalid},
		{"a/b", apperr.Invalid},
		{"é", apperr.Invalid},
		{strings.Repeat("x", 129), apperr.Invalid},
	}
	for _, tc := range cases {
		_, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "B", Plan: b.free, ExternalID: tc.ext})
		if apperr.CodeOf(err) != tc.code || !slices.Equal(fieldsOf(err), []string{"external_id"}) {
			t.Errorf("create %q: got %v, want %s on external_id", tc.ext, err, tc.code)
		}
		_, err = b.svc.UpdateTenant(b.ctx, b.mustTenant(t, b.free).ID, entitlements.TenantPatch{ExternalID: entitlements.OptionalString{Set: true, Value: extPtr(tc.ext)}})
		if apperr.CodeOf(err) != tc.code || !slices.Equal(fieldsOf(err), []string{"external_id"}) {
			t.Errorf("update %q: got %v, want %s on external_id", tc.ext, err, tc.code)
		}
	}
	if _, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "C", Plan: b.free, ExternalID: strings.Repeat("x", 128)}); err != nil {
		t.Fatalf("128 characters: %v", err)
	}
}

func TestUpdateTenantMovesAlias(t *testing.T) {
	b := setup(t)
	sub := b.rdb.Subscribe(b.ctx, b.store.Keys().Invalidations())
	defer sub.Close()
	if _, err := sub.Receive(b.ctx); err != nil {
		t.Fatal(err)
	}
	one, two := uniq("one"), uniq("two")
	tn, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "A", Plan: b.free, ExternalID: one})
	if err != nil {
		t.Fatal(err)
	}
	alias := func(ext string) string {
		t.Helper()
		id, _, err := b.store.Alias(b.ctx, ext)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if alias(one) != tn.ID {
		t.Fatalf("alias of %s after create = %q", one, alias(one))
	}
	drain(t, sub.Channel(), tn.ID) // the create's announcement
	// A rename keeps the external id and announces nothing of it.
	got, err := b.svc.UpdateTenant(b.ctx, tn.ID, entitlements.TenantPatch{Name: extPtr("A2")})
	if err != nil || got.Name != "A2" || *got.ExternalID != one {
		t.Fatalf("rename: %+v %v", got, err)
	}
	got, err = b.svc.UpdateTenant(b.ctx, tn.ID, entitlements.TenantPatch{ExternalID: entitlements.OptionalString{Set: true, Value: extPtr(two)}})
	if err != nil || *got.ExternalID != two || got.EntitlementVersion != tn.EntitlementVersion {
		t.Fatalf("change: %+v %v", got, err)
	}
	if alias(one) != "" || alias(two) != tn.ID {
		t.Fatalf("after change: %q → %q, %q → %q", one, alias(one), two, alias(two))
	}
	drain(t, sub.Channel(), tn.ID)
	// The old id is free for another tenant; a late delete of it by the
	// first tenant never takes it away.
	other, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "B", Plan: b.free, ExternalID: one})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.MoveAlias(b.ctx, tn.ID, one, "", tn.EntitlementVersion); err != nil {
		t.Fatal(err)
	}
	if alias(one) != other.ID {
		t.Fatalf("a stale delete took %s from its new tenant", one)
	}
	got, err = b.svc.UpdateTenant(b.ctx, tn.ID, entitlements.TenantPatch{ExternalID: entitlements.OptionalString{Set: true}})
	if err != nil || got.ExternalID != nil {
		t.Fatalf("clear: %+v %v", got, err)
	}
	if alias(two) != "" {
		t.Fatalf("cleared external id still has an alias")
	}
	drain(t, sub.Channel(), tn.ID)
	if _, err := b.svc.UpdateTenant(b.ctx, "00000000-0000-0000-0000-000000000000", entitlements.TenantPatch{Name: extPtr("x")}); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown tenant: %v", err)
	}
	if _, err := b.svc.UpdateTenant(b.ctx, tn.ID, entitlements.TenantPatch{Name: extPtr("  ")}); !slices.Equal(fieldsOf(err), []string{"name"}) {
		t.Fatalf("blank name: %v", err)
	}
}

// drain waits for an announcement of tenant on the invalidation channel.
func drain(t *testing.T, ch <-chan *redis.Message, tenant string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-ch:
			if strings.HasPrefix(m.Payload, tenant+":") {
				return
			}
		case <-timeout:
			t.Fatalf("no announcement of %s", tenant)
		}
	}
}

func TestLoadExternalAndRepublishAlias(t *testing.T) {
	b := setup(t)
	ext := uniq("ext")
	tn, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "A", Plan: b.free, ExternalID: ext})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Del(b.ctx, b.store.Keys().Alias(ext)).Err(); err != nil {
		t.Fatal(err)
	}
	id, err := b.svc.LoadExternal(b.ctx, ext)
	if err != nil || id != tn.ID {
		t.Fatalf("LoadExternal = %q, %v", id, err)
	}
	if got, ok, _ := b.store.Alias(b.ctx, ext); !ok || got != tn.ID {
		t.Fatalf("loaded alias not written back: %q %v", got, ok)
	}
	if _, err := b.svc.LoadExternal(b.ctx, uniq("nobody")); !errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("unknown external id: %v", err)
	}
	if err := b.rdb.Del(b.ctx, b.store.Keys().Alias(ext)).Err(); err != nil {
		t.Fatal(err)
	}
	for after := ""; ; {
		st, err := b.svc.Republish(b.ctx, after, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if after = st.Last; after == "" {
			break
		}
	}
	if got, ok, _ := b.store.Alias(b.ctx, ext); !ok || got != tn.ID {
		t.Fatalf("republish did not write the alias back: %q %v", got, ok)
	}
	if ttl := b.rdb.TTL(b.ctx, b.store.Keys().Alias(ext)).Val(); ttl <= 0 {
		t.Fatalf("alias without a TTL: %v", ttl)
	}
}

func TestTenantByRef(t *testing.T) {
	b := setup(t)
	ext := uniq("ref")
	tn, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "A", Plan: b.free, ExternalID: ext})
	if err != nil {
		t.Fatal(err)
	}
	// A tenant whose external id is another tenant's id: the id wins.
	other := b.mustTenant(t, b.free)
	shadow, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "S", Plan: b.free, ExternalID: other.ID})
	if err != nil {
		t.Fatal(err)
	}
	// A UUID that is no tenant's id but is an external id.
	orphan := "11111111-2222-4333-8444-" + uniq("")[1:9] + "0000"
	byUUID, err := b.svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "U", Plan: b.free, ExternalID: orphan})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{tn.ID: tn.ID, ext: tn.ID, other.ID: other.ID, orphan: byUUID.ID, uniq("nobody"): "", "bad ref": "", "": ""}
	_ = shadow
	_, err = b.svc.WriteAndPublish(b.ctx, func(ctx context.Context, w *entitlements.Writes) error {
		for ref, id := range want {
			got, err := w.TenantByRef(ctx, ref)
			if err != nil || got != id {
				t.Errorf("TenantByRef(%q) = %q, %v; want %q", ref, got, err, id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
