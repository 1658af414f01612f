#!/usr/bin/env bash
# flushcost.sh: what one flush pass (1M keys in Redis, 1,000 active tenants) costs Redis in
# instructions, counted by callgrind (valgrind) on a private redis-server: BenchmarkFlushPass1MKeys
# reports redis-instr/pass beside its usual figures. Instruction counts do not move with the
# machine's load, unlike Redis CPU ms, so this is the figure to compare two versions of the
# flush scripts with. The last pass's profile is kept and its top functions printed
# (callgrind_annotate, inclusive and self), to see whether the time is in the commands, Lua or the replies.
# Needs valgrind, redis-server and Postgres (as the benchmark does).
#   scripts/flushcost.sh [benchtime, default 3x]
# FLUSHCOST_PROFILE=<file> keeps the last pass's callgrind profile there (callgrind_annotate it).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-3x}
. scripts/callgrind-redis.sh
callgrind_redis flushcost --enable-debug-command yes
FLUSHCOST_REDIS=127.0.0.1:$port FLUSHCOST_CALLGRIND_PID=$vpid FLUSHCOST_CALLGRIND_OUT=$cg \
  go test -count=1 -timeout 60m -run '^$' -bench FlushPass1MKeys -benchtime "$n" ./internal/metering/
last=$(ls -v "$work"/cg.out.* 2>/dev/null | tail -1)
if [[ -n $last ]]; then
  [[ -n ${FLUSHCOST_PROFILE:-} ]] && cp "$last" "$FLUSHCOST_PROFILE"
  echo "## the last pass's profile, inclusive (callgrind_annotate --inclusive=yes)"
  callgrind_annotate --inclusive=yes "$last" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n 1,45p
  echo "## the last pass's profile, self"
  callgrind_annotate "$last" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n 1,30p
fi
