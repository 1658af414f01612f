#!/usr/bin/env bash
# scriptcost.sh: what one decision costs Redis in instructions, counted by callgrind
# (valgrind), for redis_rate v10 Allow and Tollgate's decisions (BenchmarkScriptCost).
# Instruction counts do not move with the machine's load, unlike µs, so this is the
# figure to compare two versions of a script with. Needs valgrind and redis-server.
#   scripts/scriptcost.sh [benchtime, default 5000x]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5000x}
work=$(mktemp -d -t scriptcost.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/valgrind.log" 2>&1 &
vpid=$!
trap 'kill $vpid 2>/dev/null; wait $vpid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
SCRIPTCOST_REDIS=127.0.0.1:$port SCRIPTCOST_CALLGRIND_PID=$vpid SCRIPTCOST_CALLGRIND_OUT=$work/cg.out \
  go test -count=1 -run '^$' -bench BenchmarkScriptCost -benchtime "$n" ./limiter/
