package credits_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/credits"
)

// A flush's draw is recorded once per flush id and grant: a replay answers
// what the first recording attributed and changes nothing.
func TestDrawIsRecordedOncePerFlush(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tn := b.tenant(t)
	g := b.grant(t, tn, 100, 10, nil)
	p := b.clock.Now().Truncate(time.Hour)
	d := credits.Draw{FlushID: "claim-1", GrantID: g.ID, PeriodStart: p, Units: 30}
	for i := range 3 {
		r, err := b.svc.RecordDraws(ctx, []credits.Draw{d})
		if err != nil {
			t.Fatal(err)
		}
		if r[0].Attributed != 30 || r[0].Duplicate != (i > 0) {
			t.Fatalf("recording %d: %+v", i, r[0])
		}
	}
	got, err := b.svc.Get(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Consumed != 30 || got.Remaining != 70 {
		t.Fatalf("after one flush replayed: %+v", got)
	}
	// More than is left: the grant gives what it has; the caller counts
	// the rest elsewhere.
	r, err := b.svc.RecordDraws(ctx, []credits.Draw{{FlushID: "claim-2", GrantID: g.ID, PeriodStart: p, Units: 90}})
	if err != nil {
		t.Fatal(err)
	}
	if r[0].Attributed != 70 {
		t.Fatalf("overdraw attributed %d, want 70", r[0].Attributed)
	}
	// A refund gives back at most what the period consumed.
	r, err = b.svc.RecordDraws(ctx, []credits.Draw{{FlushID: "settle-1", GrantID: g.ID, PeriodStart: p, Units: -500}})
	if err != nil {
		t.Fatal(err)
	}
	if r[0].Attributed != -100 {
		t.Fatalf("refund attributed %d, want -100", r[0].Attributed)
	}
	if got, _ := b.svc.Get(ctx, g.ID); got.Consumed != 0 || got.Remaining != 100 || got.Status != credits.StatusActive {
		t.Fatalf("after the refund: %+v", got)
	}
	if _, err := b.svc.RecordDraws(ctx, []credits.Draw{{FlushID: "", GrantID: "nope", Units: 1}}); apperr.CodeOf(err) != apperr.Invalid {
		t.Fatalf("a bad draw: %v", err)
	}
	if _, err := b.svc.RecordDraws(ctx, []credits.Draw{{FlushID: "x", GrantID: "00000000-0000-4000-8000-000000000000", PeriodStart: p, Units: 1}}); !errors.Is(err, credits.ErrNotFound) {
		t.Fatalf("a draw of no grant: %v", err)
	}
}

// Units the limiter drew before a void or an expiry reached it were used:
// they come out of what the close set aside, never out of thin air.
func TestDrawAfterCloseComesFromTheClosedBucket(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tn := b.tenant(t)
	p := b.clock.Now().Truncate(time.Hour)
	v := b.grant(t, tn, 100, 10, nil)
	if _, err := b.svc.Void(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	exp := b.grant(t, tn, 100, 10, ptr(b.clock.Now().Add(time.Minute)))
	b.clock.Advance(2 * time.Minute)
	if n, err := b.svc.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("ExpireDue: %d, %v", n, err)
	}
	if _, err := b.svc.Void(ctx, exp.ID); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("voiding an expired grant: %v", err)
	}
	r, err := b.svc.RecordDraws(ctx, []credits.Draw{
		{FlushID: "f", GrantID: v.ID, PeriodStart: p, Units: 40},
		{FlushID: "f", GrantID: exp.ID, PeriodStart: p, Units: 25},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r[0].Attributed != 40 || r[1].Attributed != 25 {
		t.Fatalf("attributed: %+v", r)
	}
	gv, _ := b.svc.Get(ctx, v.ID)
	ge, _ := b.svc.Get(ctx, exp.ID)
	if gv.Consumed != 40 || gv.Voided != 60 || gv.Remaining != 0 || gv.Status != credits.StatusVoided {
		t.Fatalf("voided grant: %+v", gv)
	}
	if ge.Consumed != 25 || ge.Expired != 75 || ge.Remaining != 0 || ge.Status != credits.StatusExpired || !ge.ExpiredAt.Equal(*exp.ExpiresAt) {
		t.Fatalf("expired grant: %+v", ge)
	}
}

// The balance holds the active grants in the limiter's draw order:
// priority, then earliest expiry (none last), then creation; pending,
// voided, expired and empty grants are left out, and the next grant to
// take effect is named.
func TestBalanceInDrawOrder(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tn := b.tenant(t)
	now := b.clock.Now()
	late := b.grant(t, tn, 1, 20, nil)
	soon := b.grant(t, tn, 2, 20, ptr(now.Add(time.Hour)))
	sooner := b.grant(t, tn, 4, 20, ptr(now.Add(time.Minute)))
	first := b.grant(t, tn, 8, 5, nil)
	tie := b.grant(t, tn, 16, 20, nil) // same priority and expiry as late: created after it
	voided := b.grant(t, tn, 32, 1, nil)
	if _, err := b.svc.Void(ctx, voided.ID); err != nil {
		t.Fatal(err)
	}
	pendingAt := now.Add(time.Hour).Truncate(time.Second)
	amt := int64(64)
	if _, err := b.svc.Create(ctx, tn, credits.GrantInput{Meter: "requests", Amount: &amt, EffectiveAt: &pendingAt}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Create(ctx, tn, credits.GrantInput{Meter: "exports", Amount: &amt}); err != nil {
		t.Fatal(err)
	}
	now = b.clock.Now()
	bal, err := b.svc.Balance(ctx, tn, "requests", now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{first.ID, sooner.ID, soon.ID, late.ID, tie.ID}
	var got []string
	for _, g := range bal.Grants {
		got = append(got, g.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || bal.Available != 31 || bal.NextEffectiveAt == nil || !bal.NextEffectiveAt.Equal(pendingAt) {
		t.Fatalf("balance %+v\ngot order  %v\nwant order %v", bal, got, want)
	}
	// Two minutes on, sooner has expired.
	bal, err = b.svc.Balance(ctx, tn, "requests", now.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if bal.Available != 27 || len(bal.Grants) != 4 {
		t.Fatalf("later balance %+v", bal)
	}
}

// The ledger's invariant under random operations from concurrent writers:
// grants issued, draws and refunds recorded (each flush sometimes
// replayed, sometimes by two writers at once), grants voided and expired
// while the clock moves. At every check and at the end, per grant:
// amount = consumed + remaining + expired + voided, every bucket ≥ 0,
// consumed = the sum of its per-period rows = the sum of what the ledger
// answered as attributed, and a closed grant has nothing remaining.
func TestLedgerInvariantUnderRandomConcurrentOperations(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tenants := []string{b.tenant(t), b.tenant(t)}
	var (
		mu         sync.Mutex
		grants     []string
		attributed = map[string]int64{}          // grant → sum of attributed answers, first recordings only
		flushes    = map[string][]credits.Draw{} // recorded flush ids, to replay
	)
	for _, tn := range tenants {
		for range 4 {
			grants = append(grants, b.grant(t, tn, 50+rand.Int64N(200), rand.IntN(101), ptr(b.clock.Now().Add(time.Duration(1+rand.IntN(60))*time.Minute))).ID)
		}
	}
	periods := []time.Time{b.clock.Now().Truncate(time.Hour), b.clock.Now().Truncate(time.Hour).Add(time.Hour)}
	record := func(draws []credits.Draw) error {
		r, err := b.svc.RecordDraws(ctx, draws)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, x := range r {
			if !x.Duplicate {
				attributed[draws[i].GrantID] += x.Attributed
			}
		}
		return nil
	}
	check := func(when string) {
		t.Helper()
		rows, err := b.db.Query(ctx, `
SELECT g.id::text, g.amount, g.consumed, g.remaining, g.expired, g.voided, (g.voided_at IS NOT NULL OR g.expired_at IS NOT NULL),
       COALESCE((SELECT sum(c.consumed) FROM credit_consumption c WHERE c.grant_id = g.id), 0),
       COALESCE((SELECT sum(f.attributed) FROM credit_flushes f WHERE f.grant_id = g.id), 0)
  FROM credit_grants g WHERE g.tenant_id = ANY($1)`, tenants)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var id string
			var amount, consumed, remaining, expired, voided, perPeriod, flushed int64
			var closed bool
			if err := rows.Scan(&id, &amount, &consumed, &remaining, &expired, &voided, &closed, &perPeriod, &flushed); err != nil {
				t.Fatal(err)
			}
			n++
			if amount != consumed+remaining+expired+voided || consumed < 0 || remaining < 0 || expired < 0 || voided < 0 {
				t.Fatalf("%s: grant %s: amount %d ≠ consumed %d + remaining %d + expired %d + voided %d", when, id, amount, consumed, remaining, expired, voided)
			}
			if consumed != perPeriod || consumed != flushed {
				t.Fatalf("%s: grant %s: consumed %d, per-period rows %d, flush records %d", when, id, consumed, perPeriod, flushed)
			}
			if closed && remaining != 0 {
				t.Fatalf("%s: grant %s closed with %d remaining", when, id, remaining)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no grants")
		}
	}

	const writers, opsEach = 6, 60
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := range opsEach {
				mu.Lock()
				gs := append([]string(nil), grants...)
				mu.Unlock()
				var err error
				switch op := rng.IntN(100); {
				case op < 50: // a flush drawing from one to three grants
					id := fmt.Sprintf("w%d-%d", w, i)
					var draws []credits.Draw
					for range 1 + rng.IntN(3) {
						units := rng.Int64N(40)
						if rng.IntN(5) == 0 {
							units = -rng.Int64N(30) // a settlement's refund
						}
						draws = append(draws, credits.Draw{FlushID: id, GrantID: gs[rng.IntN(len(gs))], PeriodStart: periods[rng.IntN(2)], Units: units})
					}
					draws = dedupeGrants(draws)
					if err = record(draws); err == nil {
						mu.Lock()
						flushes[id] = draws
						mu.Unlock()
					}
				case op < 65: // a replay of a recorded flush (a worker that died before its ack)
					mu.Lock()
					var draws []credits.Draw
					for _, d := range flushes {
						draws = d
						break
					}
					mu.Unlock()
					if draws != nil {
						err = record(draws)
					}
				case op < 75:
					_, err = b.svc.Void(ctx, gs[rng.IntN(len(gs))])
					if apperr.CodeOf(err) == apperr.Conflict {
						err = nil // expired meanwhile
					}
				case op < 85:
					b.clock.Advance(time.Duration(rng.IntN(90)) * time.Second)
					_, err = b.svc.ExpireDue(ctx)
				default:
					tn := tenants[rng.IntN(len(tenants))]
					amount, prio := 1+rng.Int64N(300), rng.IntN(101)
					var g credits.Grant
					g, err = b.svc.Create(ctx, tn, credits.GrantInput{Meter: "requests", Amount: &amount, Priority: &prio,
						ExpiresAt: ptr(b.clock.Now().Add(time.Duration(1+rng.IntN(30)) * time.Minute))})
					if err == nil {
						mu.Lock()
						grants = append(grants, g.ID)
						mu.Unlock()
					}
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d op %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	// The invariant holds while they run, too.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			check("while writing")
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check("at the end")
	// Replaying every recorded flush changes nothing, and what the ledger
	// answered adds up to what it holds.
	for _, d := range flushes {
		r, err := b.svc.RecordDraws(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range r {
			if !x.Duplicate {
				t.Fatalf("a replayed flush was recorded again: %+v", d)
			}
		}
	}
	check("after replaying every flush")
	for _, id := range grants {
		g, err := b.svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if g.Consumed != attributed[id] {
			t.Fatalf("grant %s consumed %d, the ledger answered %d attributed", id, g.Consumed, attributed[id])
		}
	}
	if len(flushes) < writers*opsEach/4 {
		t.Fatalf("only %d flushes recorded", len(flushes))
	}
}

// dedupeGrants keeps one draw per grant (a flush names each grant once).
func dedupeGrants(ds []credits.Draw) []credits.Draw {
	seen := map[string]bool{}
	var out []credits.Draw
	for _, d := range ds {
		if !seen[d.GrantID] {
			seen[d.GrantID] = true
			out = append(out, d)
		}
	}
	return out
}

// Flush records older than any claim can live in Redis are pruned; newer
// ones stay, so a replay within that time still adds nothing.
func TestFlushRecordsArePrunedAfterTheClaimTTL(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	g := b.grant(t, b.tenant(t), 100, 10, nil)
	p := b.clock.Now().Truncate(time.Hour)
	if _, err := b.svc.RecordDraws(ctx, []credits.Draw{{FlushID: "old", GrantID: g.ID, PeriodStart: p, Units: 1}}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(40 * 24 * time.Hour)
	if _, err := b.svc.RecordDraws(ctx, []credits.Draw{{FlushID: "new", GrantID: g.ID, PeriodStart: p, Units: 1}}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * 24 * time.Hour)
	if _, err := b.svc.PruneFlushRecords(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, err := b.db.Query(ctx, `SELECT flush_id FROM credit_flushes WHERE grant_id = $1`, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || fmt.Sprint(ids) != "[new]" {
		t.Fatalf("flush records left: %v, %v", ids, err)
	}
	if got, _ := b.svc.Get(ctx, g.ID); got.Consumed != 2 {
		t.Fatalf("pruning changed the grant: %+v", got)
	}
}
