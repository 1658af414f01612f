package credentials_test

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAuthenticateCached is the steady state of every /v1 request.
func BenchmarkAuthenticateCached(b *testing.B) {
	bb := setup(b)
	bb.svc = bb.newService(quiet{b}) // the benchmark's own log lines would dominate
	tn := bb.mustTenant(b, bb.free)
	ctx, cancel := context.WithCancel(bb.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = bb.svc.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	k, err := bb.svc.IssueKey(bb.ctx, tn.ID, "")
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !bb.svc.KeyCacheLive() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := bb.svc.Authenticate(bb.ctx, k.Key); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := bb.svc.Authenticate(bb.ctx, k.Key); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// quiet is a TB whose Log drops lines.
type quiet struct{ testing.TB }

func (quiet) Log(...any) {}
