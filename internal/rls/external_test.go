package rls_test

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/rls"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

func extDescriptor(ext string) *ratelimitv3.RateLimitDescriptor {
	return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: rls.EntryExternalID, Value: ext}}}
}

// An external_id entry names the tenant as tenant_id does: under a service
// credential, the same counters, an unknown one refused as an unknown
// tenant, a removed one refused within a second.
func TestExternalIDEntryNamesTheTenant(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{})
	tenantID, _ := tenantWithKey(t, in, 0.001, 3, 1000) // a burst of 3, no refill to speak of
	ext := "org:" + tenantID[:8] + "@eu"
	ctx := context.Background()
	if _, err := in.ents.UpdateTenant(ctx, tenantID, entitlements.TenantPatch{ExternalID: entitlements.OptionalString{Set: true, Value: &ext}}); err != nil {
		t.Fatal(err)
	}
	tok, err := in.keys.IssueServiceToken(ctx, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	with := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok.Token)

	if resp := ask(t, in, ctx, 0, extDescriptor(ext)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "missing-credential" {
		t.Fatalf("without a service token: %v", resp)
	}
	// Two by external id and one by tenant id take the same burst of 3.
	for i, d := range []*ratelimitv3.RateLimitDescriptor{extDescriptor(ext), {Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant_id", Value: tenantID}}}, extDescriptor(ext)} {
		if resp := ask(t, in, with, 0, d); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("decision %d: %v", i, resp)
		}
	}
	if resp := ask(t, in, with, 0, extDescriptor(ext)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "" {
		t.Fatalf("the fourth should be the rate's refusal: %v", resp)
	}
	for _, unknown := range []string{"org:nobody", "", "{bad}"} {
		resp := ask(t, in, with, 0, extDescriptor(unknown))
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "unknown-tenant" {
			t.Fatalf("unknown external id %q: %v", unknown, resp)
		}
	}
	if _, err := in.ents.UpdateTenant(ctx, tenantID, entitlements.TenantPatch{ExternalID: entitlements.OptionalString{Set: true}}); err != nil {
		t.Fatal(err)
	}
	took := testkit.Eventually(t, time.Second, "a removed external id is an unknown tenant", func() bool {
		return header(ask(t, in, with, 0, extDescriptor(ext)), rls.ReasonHeader) == "unknown-tenant"
	})
	t.Logf("removed external id refused after %s", took)
}
