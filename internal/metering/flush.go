package metering

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/limitstore"
)

// FlushStats counts what one flush pass moved.
type FlushStats struct {
	Counters int   // counters whose claim was committed (or found committed)
	Units    int64 // units added to Postgres by this pass
	Dropped  int   // claims of unknown tenants, acknowledged and dropped
	// Stale counts claims from a Redis hash behind Postgres (a replica
	// promoted after losing writes): not counted, their counters rebased
	// on Postgres's usage.
	Stale int
}

// flushBatch is how many counters one claim script and one acknowledgement
// script take; flushCommit is how many claims one Postgres statement
// commits. A pass over a thousand active tenants is then a few Redis
// scripts and one or two statements, whatever the keyspace's size.
const (
	flushBatch  = 500
	flushCommit = 1000
)

// claimedBatch is one batch of DirtyPendingBatches after its claim script:
// at[i] is the index of ks[i]'s claim in the pass's pending claims, -1
// when the counter had nothing to flush.
type claimedBatch struct {
	ks []limitstore.PendingKey
	at []int
}

// FlushOnce moves every pending limiter counter into Postgres, exactly
// once. It finds them through their dirty marks (no keyspace scan), claims
// them batch by batch (ClaimPendingBatch moves each counter's growth into
// a flushing record with a claim id, or returns the earlier unacknowledged
// record), commits up to flushCommit claims in one statement
// (commitClaims), then acknowledges the committed ones (AckPendingBatch).
// A crash before a commit leaves the records, which the next pass claims
// again under the same ids; a crash after it leaves them too, and the
// replay finds its ids already inserted.
func (s *Service) FlushOnce(ctx context.Context) (FlushStats, error) {
	var st FlushStats
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	var batches []claimedBatch
	var claims []FlushClaim
	commit := func() error {
		if len(claims) > 0 {
			out, res, cst, err := s.commitClaimsResults(ctx, claims)
			st.Counters += cst.Counters
			st.Units += cst.Units
			st.Dropped += cst.Dropped
			st.Stale += cst.Stale
			if cst.Stale > 0 {
				s.log.WarnContext(ctx, "flush found counters behind Postgres (a Redis rollback): rebasing them", "counters", cst.Stale)
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fail(err) // the claims not committed stay for the next pass
			}
			for _, b := range batches {
				acks := make([]limitstore.Ack, len(b.ks))
				n := 0
				for i, j := range b.at {
					if j >= 0 && out[j] != commitFailed {
						acks[i] = limitstore.Ack{ID: claims[j].ID, Seq: res[j].seq, Stale: out[j] == commitStale, Durable: res[j].durable}
						n++
					}
				}
				if n == 0 {
					continue
				}
				if err := s.store.AckPendingBatch(ctx, b.ks, acks); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					fail(err) // replayed next pass, found committed
				}
			}
		}
		batches, claims = batches[:0], claims[:0]
		return nil
	}
	err := s.store.DirtyPendingBatches(ctx, flushBatch, func(ks []limitstore.PendingKey) error {
		cs, err := s.store.ClaimPendingBatch(ctx, ks)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fail(err) // the next pass claims them
			return nil
		}
		b := claimedBatch{ks: ks, at: make([]int, len(ks))}
		for i, k := range ks {
			b.at[i] = -1
			if cs[i].ID == "" {
				continue // nothing to flush
			}
			b.at[i] = len(claims)
			claims = append(claims, FlushClaim{ID: cs[i].ID, Tenant: k.Tenant, Meter: k.Meter, PeriodStart: k.PeriodStart, N: cs[i].N, Seq: cs[i].Seq, Grants: cs[i].Grants})
		}
		batches = append(batches, b)
		// Claims of many small batches (one per slot on a Cluster) share
		// a commit; a commit never waits for more than flushCommit.
		if len(claims) >= flushCommit {
			return commit()
		}
		return nil
	})
	if err == nil {
		err = commit()
	}
	if err == nil {
		err = first
	}
	if err != nil {
		return st, fmt.Errorf("metering: flush: %w", err)
	}
	return st, nil
}

// RunFlusher flushes every interval until ctx ends. Every worker runs it:
// claims make concurrent flushers safe (two flushers of one claim insert
// the same batch id, and one of them adds nothing), so no leader is needed
// and a restarted worker flushes at once, without waiting for a leader
// election as a River periodic job would.
func (s *Service) RunFlusher(ctx context.Context, interval time.Duration, rdb redis.UniversalClient) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	lastRefusals := time.Time{}
	// Counters from before the dirty marks (a Redis kept across an
	// upgrade) are found by one scan at start; every pass after reads the
	// marks only.
	if n, err := s.store.AdoptUnmarked(ctx); err != nil && ctx.Err() == nil {
		s.log.ErrorContext(ctx, "adopting unmarked counters failed", "err", err)
	} else if n > 0 {
		s.log.InfoContext(ctx, "adopted counters without a dirty mark", "counters", n)
	}
	for {
		st, err := s.FlushOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "flush failed", "err", err)
		}
		if s.opts.OnFlush != nil && ctx.Err() == nil {
			s.opts.OnFlush(st, err)
		}
		// Refusal counts are a chart, not money: every 10 intervals is plenty.
		if rdb != nil && time.Since(lastRefusals) >= 10*interval {
			lastRefusals = time.Now()
			if _, err := s.FlushRefusals(ctx, rdb); err != nil && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "refusals flush failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			// A last pass on the way out, so that a clean stop leaves
			// nothing for the next worker; a killed one leaves claims
			// that the next pass replays.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if _, err := s.FlushOnce(fctx); err != nil {
				s.log.ErrorContext(fctx, "final flush failed", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
