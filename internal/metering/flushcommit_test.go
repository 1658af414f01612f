package metering

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// statementCounter counts the statements a pool sends, batched or not: a
// flush that went back to one commit per counter shows here.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (c *statementCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statementCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// countedBundle is setup's bundle whose service talks to the package's
// database through a pool that counts statements, and logs into a buffer.
func countedBundle(t *testing.T) (*bundle, *statementCounter, *testkit.Buffer) {
	t.Helper()
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	sc := &statementCounter{}
	cfg.ConnConfig.Tracer = sc
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &testkit.Buffer{}
	b.svc = NewService(pool, b.store, slog.New(slog.NewTextHandler(logs, nil)), b.svc.opts)
	return b, sc, logs
}

// newTenants inserts n tenants on one plan, anchored at anchor.
func (b *bundle) newTenants(t testing.TB, n int, anchor time.Time) []string {
	t.Helper()
	plan := "p" + randHex(6)
	if _, err := b.db.Exec(b.ctx, `INSERT INTO plans (key, name) VALUES ($1, $1)`, plan); err != nil {
		t.Fatal(err)
	}
	rows, err := b.db.Query(b.ctx, `INSERT INTO tenants (name, plan_key, period_anchor)
SELECT 't' || g, $1, $2 FROM generate_series(1, $3) g RETURNING id`, plan, anchor, n)
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tenants) != n {
		t.Fatalf("tenants %d, %v", len(tenants), err)
	}
	return tenants
}

func (b *bundle) periodOf(t testing.TB, tenant string, at time.Time) (start, end time.Time) {
	t.Helper()
	tp, err := loadTenantPeriods(b.ctx, b.db, tenant)
	if err != nil {
		t.Fatal(err)
	}
	p := tp.at(at)
	return p.Start, p.End
}

// A batch of claims is two statements (the tenants' periods, then one
// commit), each claim lands in its own tenant's period, and a batch
// committed again adds nothing.
func TestCommitClaimsOneStatementPerBatchExactlyOnce(t *testing.T) {
	t.Parallel()
	b, sc, logs := countedBundle(t)
	now := time.Now()
	early := b.newTenants(t, 150, now.AddDate(0, 0, -20))
	late := b.newTenants(t, 150, now.AddDate(0, 0, -3))
	ghost := "00000000-0000-4000-8000-" + randHex(6)
	var claims []FlushClaim
	for i, tn := range append(append([]string{}, early...), late...) {
		start, _ := b.periodOf(t, tn, now)
		claims = append(claims, FlushClaim{ID: "c-" + randHex(8), Tenant: tn, Meter: "requests", PeriodStart: start, N: int64(i%7 + 1)})
	}
	claims = append(claims,
		FlushClaim{ID: "c-" + randHex(8), Tenant: ghost, Meter: "requests", PeriodStart: now.Truncate(time.Second), N: 5},
		FlushClaim{ID: "c-" + randHex(8), Tenant: "not-a-tenant", Meter: "requests", PeriodStart: now.Truncate(time.Second), N: 5},
		FlushClaim{ID: "c-" + randHex(8), Tenant: early[0], Meter: "Bad Meter", PeriodStart: now.Truncate(time.Second), N: 5})
	var want int64
	for _, c := range claims[:300] {
		want += c.N
	}

	before := sc.n.Load()
	out, st, err := b.svc.commitClaims(b.ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	if d := sc.n.Load() - before; d != 2 {
		t.Fatalf("%d statements for %d claims, want 2", d, len(claims))
	}
	if st.Counters != 300 || st.Units != want || st.Dropped != 3 {
		t.Fatalf("stats %+v, want 300 counters, %d units, 3 dropped", st, want)
	}
	for i, o := range out {
		if wantO := map[bool]commitOutcome{true: commitCommitted, false: commitDropped}[i < 300]; o != wantO {
			t.Fatalf("claim %d: outcome %d, want %d", i, o, wantO)
		}
	}
	if !strings.Contains(logs.String(), "unknown tenant") || !strings.Contains(logs.String(), "malformed tenant or meter") {
		t.Fatalf("drops not logged: %s", logs)
	}
	// Each tenant's row carries its own period: the two groups' periods
	// start and end on different days.
	for _, tn := range []string{early[0], late[0], late[149]} {
		start, end := b.periodOf(t, tn, now)
		if n := b.count(t, `SELECT count(*) FROM usage_periods WHERE tenant_id = $1 AND period_start = $2 AND period_end = $3`, tn, start, end); n != 1 {
			t.Fatalf("tenant %s: no usage_periods row for [%v, %v)", tn, start, end)
		}
	}
	sum := func() int64 {
		return b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = ANY($1)`, append(early, late...))
	}
	if got := sum(); got != want {
		t.Fatalf("durable %d, want %d", got, want)
	}
	if got := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_hourly WHERE tenant_id = ANY($1)`, append(early, late...)); got != want {
		t.Fatalf("hourly %d, want %d", got, want)
	}

	// The same claims again (a worker killed between commit and
	// acknowledgement): committed, counted once.
	out, st, err = b.svc.commitClaims(b.ctx, claims[:300])
	if err != nil || st.Counters != 300 || st.Units != 0 || out[299] != commitCommitted {
		t.Fatalf("replay: %+v %v", st, err)
	}
	if got := sum(); got != want {
		t.Fatalf("durable after replay %d, want %d", got, want)
	}
}

// Units given back (negative claims) and two claims of one counter in a
// batch are summed per row; a period and an hour never go below zero.
func TestCommitClaimsNegativeAndRepeatedCounters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tns := b.newTenants(t, 2, time.Now().AddDate(0, 0, -5))
	s0, _ := b.periodOf(t, tns[0], time.Now())
	s1, _ := b.periodOf(t, tns[1], time.Now())
	id := func() string { return "c-" + randHex(8) }
	if _, _, err := b.svc.commitClaims(b.ctx, []FlushClaim{
		{ID: id(), Tenant: tns[0], Meter: "requests", PeriodStart: s0, N: 10},
		{ID: id(), Tenant: tns[1], Meter: "requests", PeriodStart: s1, N: 3},
	}); err != nil {
		t.Fatal(err)
	}
	out, st, err := b.svc.commitClaims(b.ctx, []FlushClaim{
		{ID: id(), Tenant: tns[0], Meter: "requests", PeriodStart: s0, N: 5},
		{ID: id(), Tenant: tns[0], Meter: "requests", PeriodStart: s0, N: -8},
		{ID: id(), Tenant: tns[1], Meter: "requests", PeriodStart: s1, N: -50},
	})
	if err != nil || st.Counters != 3 || st.Units != -53 || out[2] != commitCommitted {
		t.Fatalf("commit: %v %+v %v", out, st, err)
	}
	if got := b.durable(t, tns[0], "requests", s0); got != 7 {
		t.Fatalf("tenant 0 durable %d, want 10+5-8 = 7", got)
	}
	if got := b.durable(t, tns[1], "requests", s1); got != 0 {
		t.Fatalf("tenant 1 durable %d, want 0 (3-50 clamped)", got)
	}
	if got := b.count(t, `SELECT used FROM usage_hourly WHERE tenant_id = $1`, tns[1]); got != 0 {
		t.Fatalf("tenant 1 hourly %d, want 0", got)
	}
}

// One bad row (a tenant deleted after its periods were read; a claim
// Postgres refuses) does not hold back the rest of its batch: the batch is
// split until the bad claim is alone. A deleted tenant's claim is dropped
// and logged; any other refused claim stays for the next pass and the
// commit says so.
func TestCommitRowsIsolatesBadRows(t *testing.T) {
	t.Parallel()
	b, _, logs := countedBundle(t)
	tns := b.newTenants(t, 9, time.Now().AddDate(0, 0, -5))
	start, end := b.periodOf(t, tns[0], time.Now())
	ghost := "00000000-0000-4000-8000-" + randHex(6)
	var rows []flushRow
	for i, tn := range tns {
		rows = append(rows, flushRow{i: len(rows), c: FlushClaim{ID: "c-" + randHex(8), Tenant: tn, Meter: "requests", PeriodStart: start, N: 2}, end: end})
		if i == 4 { // as if deleted between the period read and the commit
			rows = append(rows, flushRow{i: len(rows), c: FlushClaim{ID: "c-" + randHex(8), Tenant: ghost, Meter: "requests", PeriodStart: start, N: 9}, end: end})
		}
	}
	// quantity 0 breaks usage_flushes' CHECK: a claim Postgres refuses.
	rows = append(rows, flushRow{i: len(rows), c: FlushClaim{ID: "c-zero-" + randHex(4), Tenant: tns[8], Meter: "other", PeriodStart: start, N: 0}, end: end})
	out := make([]commitOutcome, len(rows))
	var st FlushStats
	err := b.svc.commitRows(b.ctx, rows, out, make([]commitResult, len(rows)), &st)
	if err == nil || !strings.Contains(err.Error(), "c-zero-") {
		t.Fatalf("err = %v, want the refused claim named", err)
	}
	for j, r := range rows {
		want := commitCommitted
		switch {
		case r.c.Tenant == ghost:
			want = commitDropped
		case r.c.N == 0:
			want = commitFailed
		}
		if out[j] != want {
			t.Fatalf("row %d (%s): outcome %d, want %d", j, r.c.Tenant, out[j], want)
		}
	}
	if st.Counters != 9 || st.Units != 18 || st.Dropped != 1 {
		t.Fatalf("stats %+v, want 9 counters, 18 units, 1 dropped", st)
	}
	if got := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = ANY($1)`, tns); got != 18 {
		t.Fatalf("durable %d, want 18", got)
	}
	if l := logs.String(); !strings.Contains(l, "flush batch refused, splitting it") || !strings.Contains(l, ghost) {
		t.Fatalf("logs: %s", l)
	}
}

// A flush pass costs a constant number of Postgres statements, not one
// per counter: the pass that went back to per-key commits fails here.
func TestFlushPassStatementsDoNotGrowWithCounters(t *testing.T) {
	t.Parallel()
	b, sc, _ := countedBundle(t)
	tenants := b.newTenants(t, 120, time.Now().AddDate(0, 0, -1))
	lim := newLimiter(t, b)
	for _, tn := range tenants {
		b.putSnapshot(t, tn, 1, map[string]limiter.Quota{"requests": {Limit: 100, Mode: "hard"}})
		if got := admit(t, b, lim, tn, 2); got != 2 {
			t.Fatalf("admitted %d", got)
		}
	}
	before := sc.n.Load()
	st, err := b.svc.FlushOnce(b.ctx)
	if err != nil || st.Counters != 120 || st.Units != 240 {
		t.Fatalf("flush = %+v, %v", st, err)
	}
	if d := sc.n.Load() - before; d > 2 {
		t.Fatalf("a pass over %d counters ran %d statements, want at most 2", st.Counters, d)
	}
	if got := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = ANY($1)`, tenants); got != 240 {
		t.Fatalf("durable %d, want 240", got)
	}
}
