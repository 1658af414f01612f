package redisproc

// A test that needs no process of its own shares one Redis: each gets a
// client and a key prefix of its own, cleaned with SCAN + UNLINK when the
// test ends (never FLUSHDB: other packages' tests share the server).
// Without a server, a test skips locally and fails when CI is set.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// URL is the server the tests use: REDISTEST_URL, else the local default.
func URL() string {
	if u := os.Getenv("REDISTEST_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// New returns a client and a unique key prefix for this test.
func New(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		Unavailable(t, "redis", err)
	}
	prefix := Prefix()
	t.Cleanup(func() {
		Clean(context.Background(), rdb, prefix)
		rdb.Close()
	})
	return rdb, prefix
}

// Prefix makes a fresh key prefix.
func Prefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "tgtest" + hex.EncodeToString(b[:])
}

// Clean unlinks every key under prefix, on every master of a cluster.
func Clean(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	clean := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				c.Unlink(ctx, batch...)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			c.Unlink(ctx, batch...)
		}
		return iter.Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, clean)
	case *redis.Ring:
		_ = c.ForEachShard(ctx, clean)
	case *redis.Client:
		_ = clean(ctx, c)
	}
}
