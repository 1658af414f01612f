package metering

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// commandStats returns Redis's INFO commandstats as calls and µs per
// command name.
func commandStats(t testing.TB, b *bundle) (calls, usec map[string]int64) {
	t.Helper()
	info, err := b.rdb.Info(b.ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls, usec = map[string]int64{}, map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls[name] = int64(n)
			case "usec":
				usec[name] = int64(n)
			}
		}
	}
	return calls, usec
}

// With a million keys in Redis and a thousand active tenants, a flush pass
// reads the dirty marks, never the keyspace: no SCAN, a few commands per
// active counter, and every unit counted before the pass is in Postgres
// when it ends (what Redis may lose is at most what was counted since the
// last pass: the FLUSH_INTERVAL bound, whatever the keyspace's size).
func TestFlushCostGrowsWithActivityNotKeyspace(t *testing.T) {
	if testing.Short() {
		t.Skip("a million keys: skipped in -short mode")
	}
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	// DEBUG POPULATE of a million keys takes seconds on a loaded machine:
	// past go-redis's 3 s read timeout, the test failed on its setup.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32, ReadTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	b := newBundle(t, setup(t).db, rdb, "tg")
	if err := rdb.Do(b.ctx, "DEBUG", "POPULATE", 1_000_000, "other").Err(); err != nil {
		t.Fatal(err)
	}
	const active = 1000
	plan := "p" + randHex(6)
	if _, err := b.db.Exec(b.ctx, `INSERT INTO plans (key, name) VALUES ($1, $1)`, plan); err != nil {
		t.Fatal(err)
	}
	rows, err := b.db.Query(b.ctx, `INSERT INTO tenants (name, plan_key, period_anchor)
SELECT 't' || g, $1, $2 FROM generate_series(1, $3) g RETURNING id`, plan, time.Now().Add(-24*time.Hour), active)
	if err != nil {
		t.Fatal(err)
	}
	var tenants []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, id)
	}
	if rows.Err() != nil || len(tenants) != active {
		t.Fatalf("tenants %d, %v", len(tenants), rows.Err())
	}
	quotas := map[string]limiter.Quota{"requests": {Limit: 1000, Mode: "hard"}}
	var snap limiter.Snapshot
	for _, tn := range tenants {
		snap = b.putSnapshot(t, tn, 1, quotas)
	}
	lim := newLimiter(t, b)
	// A first pass loads the flush scripts, as a running worker has.
	admit(t, b, lim, tenants[0], 1)
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	// What the keyspace SCAN of the earlier flush cost on this Redis.
	c0, u0 := commandStats(t, b)
	if err := b.store.ScanPending(b.ctx, func(limitstore.PendingKey) error { return nil }); err != nil {
		t.Fatal(err)
	}
	c1, u1 := commandStats(t, b)
	t.Logf("for comparison, one keyspace SCAN for pending counters: %d SCAN calls, %.2f ms of Redis CPU", c1["scan"]-c0["scan"], float64(u1["scan"]-u0["scan"])/1000)
	for _, tn := range tenants {
		if got := admit(t, b, lim, tn, 2); got != 2 {
			t.Fatalf("admitted %d, want 2", got)
		}
	}
	if n := rdb.DBSize(b.ctx).Val(); n < 1_000_000+2*active {
		t.Fatalf("dbsize %d", n)
	}

	calls0, usec0 := commandStats(t, b)
	start := time.Now()
	st, err := b.svc.FlushOnce(b.ctx)
	wall := time.Since(start)
	if err != nil || st.Counters != active || st.Units != 2*active {
		t.Fatalf("flush = %+v, %v", st, err)
	}
	calls1, usec1 := commandStats(t, b)
	var cmds, us int64
	var per []string
	for name, n := range calls1 {
		if name == "info" || n == calls0[name] {
			continue
		}
		cmds += n - calls0[name]
		// Redis counts the commands a script runs both on their own and
		// inside the script's time: the CPU is that of the commands the
		// client sent (scripts and SMEMBERS).
		if name == "evalsha" || name == "eval" || name == "smembers" {
			us += usec1[name] - usec0[name]
		}
		per = append(per, fmt.Sprintf("%s %d calls %d µs", name, n-calls0[name], usec1[name]-usec0[name]))
	}
	t.Logf("by command: %s", strings.Join(per, "; "))
	if d := calls1["scan"] - calls0["scan"]; d != 0 {
		t.Fatalf("the flush ran %d SCANs", d)
	}
	t.Logf("flush pass over %d active tenants with %d keys in Redis: %d commands (incl. inside scripts), %.2f ms of Redis CPU (INFO commandstats), %v wall",
		active, rdb.DBSize(b.ctx).Val(), cmds, float64(us)/1000, wall.Round(time.Millisecond))
	// A few commands per counter (read marks; claim, ack and the commands
	// inside them), nothing per key in Redis.
	if cmds > 20*active {
		t.Fatalf("%d commands for %d active counters", cmds, active)
	}
	// Everything counted before the pass is durable after it.
	var durable int64
	if err := b.db.QueryRow(b.ctx, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = ANY($1) AND period_start = $2`, tenants, snap.PeriodStart).Scan(&durable); err != nil {
		t.Fatal(err)
	}
	if durable != 2*active+1 {
		t.Fatalf("durable after the pass %d, want %d", durable, 2*active+1)
	}
	// And the next pass, with nothing new, costs next to nothing.
	calls0, _ = commandStats(t, b)
	if st, err := b.svc.FlushOnce(b.ctx); err != nil || st.Counters != 0 {
		t.Fatalf("idle flush = %+v, %v", st, err)
	}
	calls1, _ = commandStats(t, b)
	if d := calls1["smembers"] - calls0["smembers"]; d != 1 || len(calls1) > len(calls0)+1 {
		t.Fatalf("idle pass: %d SMEMBERS, commands %v", d, calls1)
	}
}
