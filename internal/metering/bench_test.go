package metering

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

// BenchmarkIngest measures usage ingestion (Service.Ingest: validation, one
// statement inserting the batch and updating the durable meters, the Redis
// increment) for batches of 1, 100 and 1000 events, 10% of which repeat an
// id already sent. Run: go test -run '^$' -bench Ingest -count 3 ./internal/metering
func BenchmarkIngest(b *testing.B) {
	bb := setup(b)
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			tenant := bb.newTenant(b, time.Now().Add(-time.Hour))
			bb.putSnapshot(b, tenant, 1, map[string]limiter.Quota{"tokens": {Limit: 1 << 50, Mode: "soft"}})
			now := time.Now()
			// Build every batch before timing: 10% of the ids of a batch
			// were sent before (by the previous batch, or for a batch of one
			// every tenth batch repeats the previous id).
			batches := make([][]Event, b.N)
			next := 0
			for i := range batches {
				batch := make([]Event, size)
				for j := range batch {
					id := next
					if size >= 10 && j < size/10 && next > size {
						id = next - size // sent by the previous batch
					} else if size < 10 && i%10 == 9 {
						id = next - 1
					} else {
						next++
					}
					batch[j] = Event{ID: fmt.Sprintf("e%d", id), Meter: "tokens", Quantity: 1, Timestamp: now}
				}
				batches[i] = batch
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := bb.svc.Ingest(bb.ctx, tenant, batches[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "events/s")
		})
	}
}
