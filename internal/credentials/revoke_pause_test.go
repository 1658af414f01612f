package credentials_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// A revocation while Redis holds writes (CLIENT PAUSE WRITE) commits, answers within its bound
// (three publish attempts of RedisTimeout) and is published again once
// Redis answers: another instance that had the key cached drops it then,
// not after its KeyCacheTTL.
func TestRevocationUnderRedisPauseIsPublishedWhenRedisReturns(t *testing.T) {
	b := setup(t)
	rs := redistest.StartServer(t)
	instance := func() *credentials.Service {
		rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true})
		svc := credentials.New(b.pool, b.ents, nil, credentials.Options{Redis: rdb, Prefix: b.prefix,
			RedisTimeout: 100 * time.Millisecond, KeyCacheTTL: 10 * time.Minute})
		ctx, cancel := context.WithCancel(b.ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = svc.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			rdb.Close()
			<-done
		})
		testkit.Eventually(t, 10*time.Second, "subscription live", svc.KeyCacheLive)
		return svc
	}
	a, other := instance(), instance()
	tn := b.mustTenant(t, b.free)
	k, err := a.IssueKey(b.ctx, tn.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Authenticate(b.ctx, k.Key); err != nil { // cached for 10 minutes
		t.Fatal(err)
	}

	// CLIENT PAUSE WRITE holds PUBLISH (a SIGSTOP would not do: the
	// command sits in the socket and runs on SIGCONT, whereas a publish
	// lost on the way, as in a partition, must be sent again).
	ctl := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer ctl.Close()
	if err := ctl.Do(b.ctx, "CLIENT", "PAUSE", "5000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.RevokeKey(b.ctx, k.ID); err != nil {
		t.Fatalf("RevokeKey under a Redis pause: %v (the revocation is committed; want nil)", err)
	}
	took := time.Since(start)
	t.Logf("RevokeKey under a Redis pause took %v", took)
	if took > 3*100*time.Millisecond+2*time.Second {
		t.Errorf("RevokeKey took %v under a Redis pause, want about 3 × RedisTimeout", took)
	}
	if _, err := a.Authenticate(b.ctx, k.Key); apperr.CodeOf(err) != apperr.Unauthorized {
		t.Fatalf("the revoking instance accepts the key: %v", err)
	}
	if _, err := other.Authenticate(b.ctx, k.Key); err != nil {
		t.Fatalf("other instance during the pause: %v (its cache should still hold the key; the test proves nothing otherwise)", err)
	}
	if err := ctl.Do(b.ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, "the other instance refuses the revoked key", func() bool {
		_, err := other.Authenticate(b.ctx, k.Key)
		return apperr.CodeOf(err) == apperr.Unauthorized
	})
	if !other.KeyCacheLive() {
		t.Fatal("the other instance lost its subscription (then it drops its cache anyway): the test did not see the resend")
	}
}
