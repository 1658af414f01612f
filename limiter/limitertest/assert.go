package limitertest

import (
	"context"
	"testing"

	"github.com/tollgatehq/tollgate/limiter"
)

// Decider is what the assertions decide with: *limiter.Limiter, or a
// backend's own wrapper of it.
type Decider interface {
	Allow(ctx context.Context, tenant string, req limiter.Request) (*limiter.Decision, error)
}

// Allowed decides req for tenant and fails the test unless it is admitted
// (an error fails it too). It returns the decision.
func Allowed(t testing.TB, l Decider, tenant string, req limiter.Request) *limiter.Decision {
	t.Helper()
	d, err := l.Allow(context.Background(), tenant, req)
	if err != nil {
		t.Fatalf("limitertest: %q %+v: %v, want allowed", tenant, req, err)
	}
	if !d.Allowed {
		t.Fatalf("limitertest: %q %+v refused by %q (retry in %v), want allowed", tenant, req, d.Policy, d.RetryAfter)
	}
	return d
}

// Refused decides req for tenant and fails the test unless it is refused
// by policy (any policy when policy is ""). It returns the decision.
func Refused(t testing.TB, l Decider, tenant string, req limiter.Request, policy string) *limiter.Decision {
	t.Helper()
	d, err := l.Allow(context.Background(), tenant, req)
	if err != nil {
		t.Fatalf("limitertest: %q %+v: %v, want refused", tenant, req, err)
	}
	if d.Allowed {
		t.Fatalf("limitertest: %q %+v allowed, want refused by %q", tenant, req, policy)
	}
	if policy != "" && d.Policy != policy {
		t.Fatalf("limitertest: %q %+v refused by %q, want %q", tenant, req, d.Policy, policy)
	}
	if d.RetryAfter <= 0 {
		t.Fatalf("limitertest: %q refused with RetryAfter %v, want > 0", tenant, d.RetryAfter)
	}
	return d
}

// Remaining returns what is left of policy after the decision, failing the
// test when the decision did not check it.
func Remaining(t testing.TB, d *limiter.Decision, policy string) int64 {
	t.Helper()
	for _, p := range d.Policies {
		if p.Name == policy {
			return p.Remaining
		}
	}
	t.Fatalf("limitertest: the decision did not check %q: %+v", policy, d.Policies)
	return 0
}
