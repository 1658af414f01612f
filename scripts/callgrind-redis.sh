# callgrind-redis.sh, sourced by scriptcost.sh and flushcost.sh: starts a private redis-server
# under valgrind --tool=callgrind on a free port and waits until it answers. Sets work (a
# temporary folder, removed on exit with the server), port, vpid and cg (the
# --callgrind-out-file; dumps are $cg.<n>). Extra arguments go to redis-server.
#   callgrind_redis NAME [redis-server args...]
callgrind_redis() {
  local name=$1
  shift
  work=$(mktemp -d -t "$name.XXXXXX")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cg=$work/cg.out
  valgrind --tool=callgrind --callgrind-out-file="$cg" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" "$@" >"$work/valgrind.log" 2>&1 &
  vpid=$!
  trap 'kill $vpid 2>/dev/null; wait $vpid 2>/dev/null; rm -rf "$work"' EXIT
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
}
