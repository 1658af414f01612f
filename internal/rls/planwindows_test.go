package rls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/rls"
)

// windowTenant creates a plan of plentiful rate and quota with windows, a
// tenant on it and an API key.
func windowTenant(t *testing.T, in *instance, ws catalogue.WindowInputs) string {
	t.Helper()
	ctx := context.Background()
	planKey := fmt.Sprintf("rlsw_%d_%d", time.Now().UnixNano(), planSeq.Add(1))
	if _, err := in.cat.CreatePlan(ctx, catalogue.PlanInput{Key: planKey, Name: planKey,
		Rate:    &catalogue.RateInput{PerSecond: ptr(10000.0), Burst: ptr(int64(10000))},
		Quotas:  map[string]*catalogue.QuotaInput{"requests": {Limit: ptr(int64(1 << 30)), Mode: "hard"}},
		Windows: ws,
	}); err != nil {
		t.Fatal(err)
	}
	ten, err := in.ents.CreateTenant(ctx, entitlements.TenantInput{Name: "rls " + planKey, Plan: planKey})
	if err != nil {
		t.Fatal(err)
	}
	k, err := in.keys.IssueKey(ctx, ten.ID, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}

// TestPlanWindowsInEnvoyAnswers: a plan's hourly window is enforced
// exactly across two instances, its descriptor status is told per HOUR,
// a window of 90 minutes per HOUR at its average rate, the headers carry
// every window with its length, and a cost over a window's limit is
// refused as one no wait can admit.
func TestPlanWindowsInEnvoyAnswers(t *testing.T) {
	pool := pgtest.New(t)
	prefix := redistest.Prefix()
	a, b := newInstance(t, pool, prefix, setup{}), newInstance(t, pool, prefix, setup{})
	key := windowTenant(t, a, catalogue.WindowInputs{
		{Name: "hourly", Limit: ptr(int64(20)), Length: "1h", Kind: "fixed"},
		{Name: "ninety", Limit: ptr(int64(5000)), Length: "90m"},
	})
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		in := a
		if i%2 == 1 {
			in = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch ask(t, in, context.Background(), 0, keyDescriptor(key)).OverallCode {
			case rlsv3.RateLimitResponse_OK:
				ok.Add(1)
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				over.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 20 || over.Load() != 40 {
		t.Fatalf("admitted %d and refused %d of 60 against an hourly window of 20 on two instances", ok.Load(), over.Load())
	}
	resp := ask(t, a, context.Background(), 0, keyDescriptor(key))
	st := resp.Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetName() != "hourly" ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || st.CurrentLimit.GetRequestsPerUnit() != 20 || st.LimitRemaining != 0 {
		t.Fatalf("status of the refusing window: %v", st)
	}
	if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Hour {
		t.Fatalf("duration_until_reset %s, want the rest of the hour", d)
	}
	pol := header(resp, "ratelimit-policy")
	if !strings.Contains(pol, `"hourly";q=20;w=3600`) || !strings.Contains(pol, `"ninety";q=5000;w=5400`) {
		t.Fatalf("RateLimit-Policy = %q", pol)
	}
	if ra := header(resp, "retry-after"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After = %q", ra)
	}

	// 90 minutes is no unit of Envoy's: its average rate an hour.
	key2 := windowTenant(t, a, catalogue.WindowInputs{{Name: "ninety", Limit: ptr(int64(50)), Length: "90m"}})
	st = ask(t, b, context.Background(), 45, keyDescriptor(key2)).Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "ninety" ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || st.CurrentLimit.GetRequestsPerUnit() != 33 || st.LimitRemaining != 5 {
		t.Fatalf("90-minute window: %v", st)
	}
	resp = ask(t, b, context.Background(), 51, keyDescriptor(key2))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "cost-exceeds-limit" {
		t.Fatalf("cost 51 on a window of 50: %v", resp)
	}
}
