package billing

import (
	"context"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v79"
)

// PriceInfo is what the dashboard's plan offer shows of a Stripe price
// (issue 25): its billing interval, currency and amount. Known is false
// when Stripe was not asked (no secret key) or did not answer.
type PriceInfo struct {
	ID            string
	Known         bool
	Interval      string // day, week, month, year; "" for a one-time price
	IntervalCount int64
	Currency      string // ISO code, lower case as Stripe gives it
	UnitAmount    int64  // in the currency's smallest unit
}

// priceTTL bounds how long a price read from Stripe is shown: prices are
// immutable in amount and interval, so this only bounds memory of deleted
// ones and of a price whose read failed.
const priceTTL = 10 * time.Minute

type priceCache struct {
	mu sync.Mutex
	m  map[string]cachedPrice
}

type cachedPrice struct {
	info PriceInfo
	at   time.Time
}

// pricesBudget bounds how long a page waits for Stripe's prices: a down or
// slow Stripe shows the prices by id instead of holding the dashboard.
const pricesBudget = 2 * time.Second

// Prices reads the prices from Stripe (cached for priceTTL), in parallel
// and within pricesBudget. Without a secret key, or for a price Stripe does
// not answer in time, the PriceInfo has only its ID: the dashboard lists it
// by id and still sends it to Checkout.
func (s *Service) Prices(ctx context.Context, ids []string) map[string]PriceInfo {
	out := make(map[string]PriceInfo, len(ids))
	var missing []string
	now := s.opts.Now()
	s.prices.mu.Lock()
	for _, id := range ids {
		out[id] = PriceInfo{ID: id}
		if s.stripe == nil || id == "" {
			continue
		}
		if c, ok := s.prices.m[id]; ok && now.Sub(c.at) < priceTTL {
			out[id] = c.info
			continue
		}
		missing = append(missing, id)
	}
	s.prices.mu.Unlock()
	if len(missing) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, min(pricesBudget, s.opts.StripeTimeout))
	defer cancel()
	got := make([]PriceInfo, len(missing))
	var wg sync.WaitGroup
	for i, id := range missing {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = s.readPrice(ctx, id)
		}()
	}
	wg.Wait()
	s.prices.mu.Lock()
	defer s.prices.mu.Unlock()
	if s.prices.m == nil {
		s.prices.m = map[string]cachedPrice{}
	}
	for i, info := range got {
		out[info.ID] = info
		at := now
		if !info.Known {
			// Asked again a minute later rather than after priceTTL.
			at = now.Add(time.Minute - priceTTL)
		}
		s.prices.m[missing[i]] = cachedPrice{info: info, at: at}
	}
	return out
}

func (s *Service) readPrice(ctx context.Context, id string) PriceInfo {
	params := &stripe.PriceParams{}
	params.Context = ctx
	p, err := s.stripe.Prices.Get(id, params)
	if err != nil {
		s.log.WarnContext(ctx, "stripe price not read; the dashboard lists it by id", "price", id, "err", err)
		return PriceInfo{ID: id}
	}
	info := PriceInfo{ID: id, Known: true, Currency: string(p.Currency), UnitAmount: p.UnitAmount}
	if p.Recurring != nil {
		info.Interval, info.IntervalCount = string(p.Recurring.Interval), p.Recurring.IntervalCount
	}
	return info
}

// priceLike is the price of plan to move a subscription on price current
// to: the first with current's interval and currency, else the first with
// its interval, else the plan's default. A yearly subscriber moved to
// another plan stays yearly (issue 25).
func (s *Service) priceLike(ctx context.Context, plan []string, current string) string {
	if len(plan) == 0 {
		return ""
	}
	if len(plan) == 1 || current == "" {
		return plan[0]
	}
	info := s.Prices(ctx, append(append([]string{}, plan...), current))
	cur := info[current]
	if !cur.Known {
		return plan[0]
	}
	pick := ""
	for _, id := range plan {
		p := info[id]
		if !p.Known || p.Interval != cur.Interval || p.IntervalCount != cur.IntervalCount {
			continue
		}
		if p.Currency == cur.Currency {
			return id
		}
		if pick == "" {
			pick = id
		}
	}
	if pick != "" {
		return pick
	}
	return plan[0]
}
