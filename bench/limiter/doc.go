// Package limiterbench holds the limiter's side-by-side benchmarks against
// its anchor, go-redis/redis_rate v10: BenchmarkAllow (latency and round
// trips, 1 and 32 goroutines) and BenchmarkScriptCost (what Redis spends
// per decision, under callgrind with scripts/scriptcost.sh). They live in
// the bench module so that neither the limiter nor the product requires
// redis_rate.
package limiterbench
