package billing_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// Webhook intake under load, the way Stripe delivers: signed subscription
// events for many customers, 10% of them duplicates, posted to the real
// server on the real database while a worker applies them. Reported: events
// per second answered 2xx, p50/p99 of the time to the 2xx, and drain_ms:
// how long after the last 2xx the worker had applied every event.
//
//	go test ./internal/billing -run '^$' -bench WebhookIntake -benchtime 3000x
//
// BenchmarkWebhookIntakeAt200PerSecond paces arrivals at 200/s (open loop:
// a slow answer does not slow the arrivals); BenchmarkWebhookIntakeMax
// posts from 32 concurrent clients as fast as they are answered.
func BenchmarkWebhookIntakeAt200PerSecond(b *testing.B) { benchIntake(b, 200, 0) }

func BenchmarkWebhookIntakeMax(b *testing.B) { benchIntake(b, 0, 32) }

func benchIntake(b *testing.B, rate float64, clients int) {
	e := newEnv(b, envOpts{})
	e.plans()
	const customers = 50
	cus := make([]string, customers)
	for i := range cus {
		cus[i] = newCustomer()
		e.tenant("free", cus[i])
	}
	prices := []string{"price_pro_test", "price_team_test"}
	base := time.Now().Add(-time.Hour)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		if i%10 == 9 && i > 0 {
			bodies[i] = bodies[i-5] // a duplicate delivery
			continue
		}
		c := i % customers
		bodies[i] = subEvent(b, "customer.subscription.updated", newEventID(b), cus[c], "sub_bench_"+cus[c], "active",
			prices[(i/customers)%2], base.Add(time.Duration(i)*time.Millisecond))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	lat := make([]time.Duration, b.N)
	var failures int
	var mu sync.Mutex
	post := func(i int) {
		body := bodies[i]
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Stripe-Signature", sign(body, secret, time.Now()))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		d := time.Since(start)
		ok := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		lat[i] = d
		if !ok {
			mu.Lock()
			failures++
			mu.Unlock()
		}
	}
	b.ResetTimer()
	began := time.Now()
	var wg sync.WaitGroup
	if rate > 0 {
		interval := time.Duration(float64(time.Second) / rate)
		for i := range b.N {
			if wait := time.Until(began.Add(time.Duration(i) * interval)); wait > 0 {
				time.Sleep(wait) // pacing the arrivals, not waiting for a result
			}
			wg.Add(1)
			go func() { defer wg.Done(); post(i) }()
		}
	} else {
		next := make(chan int)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					post(i)
				}
			}()
		}
		for i := range b.N {
			next <- i
		}
		close(next)
	}
	wg.Wait()
	elapsed := time.Since(began)
	answered := time.Now()
	// How long after the last 2xx the worker had applied every event.
	for {
		var pending int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM stripe_events WHERE status = 'pending'`).Scan(&pending); err != nil {
			b.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Since(answered) > time.Minute {
			b.Fatalf("%d events still pending a minute after the last 2xx", pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
	drain := time.Since(answered)
	b.StopTimer()
	if failures > 0 {
		b.Fatalf("%d of %d deliveries were not answered 200", failures, b.N)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(drain.Milliseconds()), "drain_ms")
	b.ReportMetric(0, "ns/op")
}
