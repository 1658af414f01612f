package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds reservations: a cost known only afterwards (LLM tokens,
// export sizes) is reserved as an estimate, then settled or cancelled.

// ErrReservationNotFound is returned by Settle and Cancel for a reservation
// that does not exist for the tenant: never made, already settled or
// cancelled, expired, or another tenant's. HTTP: 404.
var ErrReservationNotFound = errors.New("limiter: no such reservation")

// Reservation is an estimate held by a decision made with Request.Reserve.
type Reservation struct {
	ID        string
	Estimate  int64
	ExpiresAt time.Time
}

// rsvTarget is what a reservation adjusts: the state hash and counter field
// the decision took from, and the counter's mark and dirty set.
type rsvTarget struct {
	h, q, mark, dirty string
	// g is the state hash's field of the meter's grants and drawn what the
	// decision took of the included units and the grants (decideBody's
	// report), both "" for a tenant without grants of the meter.
	g, drawn string
}

// reserve records the reservation of an admitted decision. The estimate is
// already counted by the decision; the record only
// says what to adjust when it is settled. Should the record not be
// written, the estimate stays charged, as an expired reservation's would.
func (l *Limiter) reserve(ctx context.Context, tenant string, req *Request, d *Decision) error {
	t := d.rsv
	if t == nil {
		t = &rsvTarget{}
	}
	id := newID()
	exp := time.Now().Add(l.opts.ReservationTTL)
	err := l.call(ctx, "reserve", func(ctx context.Context) error {
		k := l.keys.reservation(tenant, id)
		_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, k, "n", req.Cost, "h", t.h, "q", t.q, "m", t.mark, "d", t.dirty, "g", t.g, "k", t.drawn)
			p.PExpire(ctx, k, l.opts.ReservationTTL)
			return nil
		})
		return err
	})
	if err != nil {
		if abandoned(err) {
			return fmt.Errorf("%w: the reservation was admitted but not recorded (its estimate stays charged): %w", ErrUnavailable, err)
		}
		return err
	}
	d.Reservation = &Reservation{ID: id, Estimate: req.Cost, ExpiresAt: exp}
	return nil
}

// settleScript settles a reservation: the difference between the actual
// cost and the estimate is added to the period counter, so that the flush
// moves the settled figure (counter − flushed mark) to Postgres. A counter
// missing from Redis gets it in g, which its rebuild adds. A charge beyond
// the limit is recorded, never refused. The hash's and marks' names come
// from the record: they share its hash tag (one slot).
//
// KEYS: reservation. ARGV: actual cost. Reply: the estimate, or -1 when
// the reservation does not exist.
//
// With grants, the record also names the meter's grants field (g) and
// what the decision took of the included units and of each grant (k):
// the settlement gives back to the grants, or draws from them, as
// settle_grants (lua/settle.lua) says, in the same script, so that the
// flush's claim carries each grant's draws as Redis finally kept them
// (a refund after a flush claimed the draw is a negative draw, which the
// ledger records as units given back to the grant).
var settleLua = luaFill("settle", map[string]string{"grants": grantsLua})

var settleScript = redis.NewScript(settleLua)

// Settle charges the actual cost of a reservation instead of its estimate:
// the difference is refunded or charged to the quota the reservation took
// from. A charge beyond the limit is recorded, never refused. It returns
// the estimate. Errors: ErrReservationNotFound, ErrInvalidRequest (a
// negative cost, or over Options.MaxCost), ErrUnavailable (Redis did not
// answer: the reservation stands and may be settled again), ErrClosed.
func (l *Limiter) Settle(ctx context.Context, tenant, id string, actual int64) (estimate int64, err error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	if !validName(tenant, true) {
		return 0, invalid("tenant %q: want 1-256 printable ASCII characters without spaces or braces", tenant)
	}
	if actual < 0 || actual > l.opts.MaxCost {
		return 0, invalid("actual cost %d: want 0 to %d", actual, l.opts.MaxCost)
	}
	if !validReservationID(id) {
		return 0, ErrReservationNotFound
	}
	var n int64
	err = l.call(ctx, "settle", func(ctx context.Context) error {
		var err error
		n, err = settleScript.Run(ctx, l.rdb, []string{l.keys.reservation(tenant, id)}, actual).Int64()
		return err
	})
	if err != nil {
		if abandoned(err) {
			return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return 0, err
	}
	if n < 0 {
		return 0, ErrReservationNotFound
	}
	return n, nil
}

// Cancel gives a reservation's estimate back (Settle with an actual cost
// of 0) and returns it.
func (l *Limiter) Cancel(ctx context.Context, tenant, id string) (estimate int64, err error) {
	return l.Settle(ctx, tenant, id, 0)
}

// validReservationID accepts what newID makes: 24 lowercase hex digits.
func validReservationID(id string) bool {
	if len(id) != 24 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
