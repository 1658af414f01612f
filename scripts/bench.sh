#!/usr/bin/env bash
# make bench: Tollgate side by side with what its users would otherwise pick.
#
#   1. libbench (Go rate limiters on one private Redis: go-redis PING, redis_rate v10,
#      ulule/limiter v3, a plain token-bucket script, Tollgate's full decision, rate only,
#      natural batching, the leased mode), at 10,000 and at 100,000 keys;
#   2. side-by-side.sh: POST /v1/check against envoyproxy/ratelimit's POST /json;
#   3. the worker's flush pass with 1M keys in a private Redis and 1,000 active tenants
#      (BenchmarkFlushPass1MKeys: ms, Redis CPU and commands per pass), and the Redis
#      instructions per decision and per flush pass (scripts/scriptcost.sh and
#      scripts/flushcost.sh, callgrind), with or without
#      PERF_DIR; side-by-side.sh is run twice, in exact and in leased mode.
#
# What it needs (nothing of it is in this repository, so that no other project's code is):
#   - PERF_DIR: a folder holding the team's perf tools (libbench/, side-by-side.sh, httpload/);
#     no default, so that a clone never reaches outside itself (make bench PERF_DIR=…).
#     They are copied to a temporary directory and built there against this checkout.
#   - Go with access to the module proxy (libbench's contenders, envoy ratelimit), a
#     redis-server binary (a private one is started on a free port), Postgres on
#     127.0.0.1:5432 (side-by-side.sh creates and drops its own database), curl.
# Without PERF_DIR it says so and runs the in-repository ./bench/cmd/bench instead (the bench
# module: its contenders, redis_rate and ulule/limiter, are required by neither the product
# nor the limiter).
#
# Knobs: RUNS (libbench runs, default 3), D (timed time per contender and goroutine
# count, default 5s), CONTENDERS, SBS=0 to skip side-by-side.sh (its own knobs:
# TENANTS, C, SLICE, ROUNDS).
set -euo pipefail
repo=$PWD
PERF_DIR=${PERF_DIR:-}
RUNS=${RUNS:-3}; D=${D:-5s}
CONTENDERS=${CONTENDERS:-ping,redis_rate,ulule,evalsha-tb,tollgate,tollgate-rate,tollgate-batch,tollgate-lease}
if [[ -z $PERF_DIR || ! -d $PERF_DIR/libbench || ! -f $PERF_DIR/side-by-side.sh ]]; then
  echo "bench: no perf tools at PERF_DIR=$PERF_DIR (libbench/, side-by-side.sh, httpload/);" >&2
  echo "bench: running the in-repository go run ./bench/cmd/bench (limiter and POST /v1/check) instead" >&2
  go run ./bench/cmd/bench
  go run ./bench/cmd/bench -http
fi
if command -v valgrind >/dev/null; then
  echo "## Redis instructions per decision (callgrind; the machine's load does not move them)"
  scripts/scriptcost.sh 5000x
  echo "## Redis instructions per flush pass, 1M keys, 1,000 active tenants (callgrind)"
  scripts/flushcost.sh 3x
fi
echo "## flush pass, 1M keys in Redis, 1,000 active tenants"
go test -count=3 -run '^$' -bench FlushPass1MKeys -benchtime 10x ./internal/metering/
if [[ -z $PERF_DIR || ! -d $PERF_DIR/libbench || ! -f $PERF_DIR/side-by-side.sh ]]; then
  exit 0
fi
PERF_DIR=$(cd "$PERF_DIR" && pwd)
work=$(mktemp -d -t tgbench.XXXXXX)
rpid=
cleanup() { [[ -n $rpid ]] && kill "$rpid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

cp -r "$PERF_DIR/libbench" "$work/"
chmod -R u+w "$work/libbench"
(
  cd "$work/libbench"
  go mod edit -replace "github.com/tollgatehq/tollgate=$repo" -replace "github.com/tollgatehq/tollgate/limiter=$repo/limiter"
  # The shared contender predates Options.Batching becoming a bool.
  sed -i 's/Batching: time.Millisecond/Batching: true/' tollgate.go
  go mod tidy >/dev/null 2>&1
  # tollgate_lease.go (contender tollgate-lease) predates Options.LocalLeases becoming Prefetch.
  sed -i 's/LocalLeases: true/Prefetch: true/' tollgate_lease.go 2>/dev/null || true
  go build -tags tollgate,tollgatelease -o "$work/libbench-bin" .
)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
rpid=$!
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "# make bench $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$RUNS"); do
  echo "## libbench run $r, 10,000 keys"
  "$work/libbench-bin" -redis "127.0.0.1:$port" -contenders "$CONTENDERS" -g 1,32 -d "$D" | grep -v '^libbench:'
  echo "## libbench run $r, 100,000 keys (past the 10,000-entry near-cache)"
  "$work/libbench-bin" -redis "127.0.0.1:$port" -contenders redis_rate,tollgate,tollgate-batch -g 32 -keys 100000 -d "$D" | grep -v '^libbench:'
done
if [[ ${SBS:-1} != 0 ]]; then
  echo "## side-by-side.sh: POST /v1/check vs envoyproxy/ratelimit POST /json"
  bash "$PERF_DIR/side-by-side.sh"
  echo "## side-by-side.sh with the leased mode (LIMITER_PREFETCH=true)"
  TOLLGATE_ENV="${TOLLGATE_ENV:-} LIMITER_PREFETCH=true" bash "$PERF_DIR/side-by-side.sh"
fi
