#!/usr/bin/env bash
# grpc-side-by-side.sh: Tollgate's ShouldRateLimit (API key -> tenant, the
# tenant's token bucket and monthly quota) against envoyproxy/ratelimit's own
# gRPC ShouldRateLimit (a fixed window per descriptor, no auth, no quota), each
# on its own private Redis, driven by the same client (bench/cmd/bench/grpcload) in
# alternating slices so a noisy machine hits both alike.
#
#   bash scripts/grpc-side-by-side.sh
#   TOLLGATE_ENV="LIMITER_PREFETCH=true" bash scripts/grpc-side-by-side.sh   # leased mode
#
# Knobs: TENANTS (2000), C (32), SLICE (5s), ROUNDS (3), PEER_VERSION,
# TOLLGATE_ENV (extra NAME=value settings for the api), KEEP_LOGS=1.
set -euo pipefail
PEER_VERSION=${PEER_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
TENANTS=${TENANTS:-2000}; C=${C:-32}; SLICE=${SLICE:-5s}; ROUNDS=${ROUNDS:-3}
work=$(mktemp -d -t gsbs.XXXXXX)
pids=()
db="gsbs_$RANDOM$RANDOM"
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  [[ ${KEEP_LOGS:-} == 1 ]] && echo "logs in $work" || rm -rf "$work"
}
trap cleanup EXIT
used=" "
free_port() { local p; for _ in $(seq 200); do p=$((20000 + RANDOM % 30000)); [[ $used == *" $p "* ]] && continue
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then used+="$p "; echo "$p"; return; fi; done; return 1; }

echo "gsbs: building"
GOBIN="$work/bin" go install "github.com/envoyproxy/ratelimit/src/service_cmd@$PEER_VERSION"
go build -o "$work/bin/api" ./cmd/api
go build -o "$work/bin/grpcload" ./bench/cmd/bench/grpcload

r1=$(free_port); r2=$(free_port); ehttp=$(free_port); egrpc=$(free_port); edebug=$(free_port)
thttp=$(free_port); tgrpc=$(free_port)
for p in $r1 $r2; do
  redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis-$p.log" 2>&1 &
  pids+=($!)
done
sleep 0.5
conf="$work/runtime/ratelimit/config"; mkdir -p "$conf"
cat >"$conf/allow.yaml" <<'Y'
domain: anchor_allow
descriptors:
  - key: tenant
    rate_limit:
      unit: second
      requests_per_unit: 1000000
Y
env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$r1" \
  RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false \
  HOST=127.0.0.1 PORT="$ehttp" GRPC_HOST=127.0.0.1 GRPC_PORT="$egrpc" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$edebug" \
  "$work/bin/service_cmd" >"$work/envoy.log" 2>&1 &
pids+=($!)

export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db?sslmode=disable" REDIS_URL="redis://127.0.0.1:$r2/0"
export HTTP_ADDR="127.0.0.1:$thttp" GRPC_ADDR="127.0.0.1:$tgrpc" ADMIN_TOKEN=tga_gsbs_admin_token_0123456789 LOG_LEVEL=warn WORKER_METRICS_ADDR=off
"$work/bin/api" migrate >/dev/null 2>&1
env ${TOLLGATE_ENV:-} "$work/bin/api" serve >"$work/api.log" 2>&1 &
pids+=($!)
T="http://127.0.0.1:$thttp"
for _ in $(seq 300); do curl -fs -o /dev/null "$T/readyz" && curl -fs -o /dev/null "http://127.0.0.1:$ehttp/healthcheck" && break; sleep 0.1; done
A=(-H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json')
curl -fs -X POST "${A[@]}" "$T/admin/v1/plans" \
  -d '{"key":"bench","name":"Bench","rate":{"per_second":1000000,"burst":1000000},"quotas":{"requests":{"limit":1000000000000,"mode":"hard"}}}' >/dev/null
echo "gsbs: creating $TENANTS tenants and keys"
: >"$work/keys"
for i in $(seq 1 "$TENANTS"); do
  tid=$(curl -fs -X POST "${A[@]}" "$T/admin/v1/tenants" -d "{\"name\":\"t$i\",\"plan\":\"bench\"}" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  curl -fs -X POST "${A[@]}" "$T/admin/v1/tenants/$tid/api-keys" -d '{}' | sed -n 's/.*"key":"\(tg_[^"]*\)".*/\1/p' >>"$work/keys"
done
[[ $(grep -c tg_ "$work/keys") == "$TENANTS" ]] || { echo "gsbs: key creation failed"; exit 1; }
# Both gRPC listeners answer before the first slice (the HTTP health checks
# above say nothing of them).
for _ in $(seq 100); do
  "$work/bin/grpcload" -addr "127.0.0.1:$egrpc" -domain anchor_allow -entry tenant -keys 1 -c 1 -d 100ms -warmup 0s 2>/dev/null | grep -q 'err=0' &&
    "$work/bin/grpcload" -addr "127.0.0.1:$tgrpc" -domain tollgate -entry api_key -prefix 'Bearer ' -keysfile "$work/keys" -c 1 -d 100ms -warmup 0s 2>/dev/null | grep -q 'err=0' && break
  sleep 0.2
done
for r in $(seq 1 "$ROUNDS"); do
  "$work/bin/grpcload" -addr "127.0.0.1:$egrpc" -domain anchor_allow -entry tenant -keys "$TENANTS" -c "$C" -d "$SLICE" 2>&1 | tail -n 2 | sed "s/^/envoy    r$r /"
  "$work/bin/grpcload" -addr "127.0.0.1:$tgrpc" -domain tollgate -entry api_key -prefix 'Bearer ' -keysfile "$work/keys" -c "$C" -d "$SLICE" | tail -n 1 | sed "s/^/tollgate r$r /"
done
grep -h '"level":"ERROR"' "$work/api.log" | head -3 || true
