#!/usr/bin/env bash
# scriptcost.sh: what one decision costs Redis in instructions, counted by callgrind
# (valgrind), for redis_rate v10 Allow and Tollgate's decisions (BenchmarkScriptCost).
# Instruction counts do not move with the machine's load, unlike µs, so this is the
# figure to compare two versions of a script with. Needs valgrind and redis-server.
#   scripts/scriptcost.sh [benchtime, default 5000x]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5000x}
. scripts/callgrind-redis.sh
callgrind_redis scriptcost
SCRIPTCOST_REDIS=127.0.0.1:$port SCRIPTCOST_CALLGRIND_PID=$vpid SCRIPTCOST_CALLGRIND_OUT=$cg \
  go test -count=1 -run '^$' -bench BenchmarkScriptCost -benchtime "$n" ./bench/limiter/
