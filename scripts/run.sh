#!/usr/bin/env bash
# `make run`: migrate, seed the demo, start bin/worker and bin/api in the
# background (logs under .data/), wait until the api is ready, print how to
# use it, then wait; Ctrl-C or SIGTERM stops both children.
#
# `make run` has already made sure Postgres and Redis answer
# (scripts/services.sh) and built bin/api and bin/worker.
set -euo pipefail
cd "$(dirname "$0")/.."

data=${TOLLGATE_DATA:-$PWD/.data}
mkdir -p "$data"
# TOLLGATE_BIN: where api and worker were built (tests build elsewhere).
bin=${TOLLGATE_BIN:-bin}

export HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:8080}
# Where this script reaches the api: a wildcard listen address is probed on
# loopback.
port=${HTTP_ADDR##*:}
host=${HTTP_ADDR%:*}
case "$host" in "" | 0.0.0.0 | "[::]") host=127.0.0.1 ;; esac
probe="$host:$port"
export PUBLIC_URL=${PUBLIC_URL:-http://$probe}
base=${PUBLIC_URL%/}

# A fixed admin token, made once and kept in .data/admin_token (the file
# TOLLGATE_DEV=true makes api serve read too), so that the token printed here
# keeps working across restarts: api serve refuses to start without one,
# since a token made up per process would differ between instances.
if [ -z "${ADMIN_TOKEN:-}" ]; then
  if [ ! -s "$data/admin_token" ]; then
    (umask 077 && printf 'tga_%s\n' "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >"$data/admin_token")
  fi
  ADMIN_TOKEN=$(tr -d '\n' <"$data/admin_token")
fi
export ADMIN_TOKEN

# The key that seals webhook endpoints' secrets at rest, made once beside
# the admin token (the file TOLLGATE_DEV=true reads too): the api and the
# worker must share it.
if [ -z "${WEBHOOK_SECRET_KEY:-}" ]; then
  if [ ! -s "$data/webhook_secret_key" ]; then
    (umask 077 && head -c 32 /dev/urandom | base64 >"$data/webhook_secret_key")
  fi
  WEBHOOK_SECRET_KEY=$(tr -d '\n' <"$data/webhook_secret_key")
fi
export WEBHOOK_SECRET_KEY

for b in "$bin/api" "$bin/worker"; do
  [ -x "$b" ] || { echo "run: $b is missing; run 'make run' (or 'make build') instead" >&2; exit 1; }
done

# Something else listening on HTTP_ADDR would make the readiness wait below
# succeed against the wrong process (a previous `make run`, say).
h=${host#[}; h=${h%]}
if (exec 3<>"/dev/tcp/$h/$port") 2>/dev/null; then
  echo "run: something already listens on $probe; stop it or set HTTP_ADDR=127.0.0.1:<port>" >&2
  exit 1
fi

echo "run: migrating"
"$bin/api" migrate 2>>"$data/api.log" || { echo "run: migrate failed; see $data/api.log" >&2; tail -n 5 "$data/api.log" >&2; exit 1; }

echo "run: seeding the demo"
if ! seed=$("$bin/api" seed-demo 2>>"$data/api.log"); then
  echo "run: seed-demo failed; see $data/api.log" >&2
  tail -n 5 "$data/api.log" >&2
  exit 1
fi
field() { sed -n "s/^$1:[[:space:]]*//p" <<<"$seed" | head -n 1; }
api_key=$(field api_key)
tenant_id=$(field tenant_id)
dashboard=$(field dashboard)

pids=()
stop() {
  trap - INT TERM EXIT
  if [ ${#pids[@]} -gt 0 ]; then
    echo
    echo "run: stopping api and worker"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  # The throwaway Postgres and Redis that scripts/services.sh started (none
  # if they were already running) stop with us, so that nothing outlives
  # `make run` and `make clean` never deletes the files of a live server.
  scripts/services.sh stop || true
  echo "run: stopped"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

# MIGRATE_ON_START: the schema was migrated just above.
MIGRATE_ON_START=false "$bin/worker" >>"$data/worker.log" 2>&1 &
pids+=($!)
MIGRATE_ON_START=false "$bin/api" serve >>"$data/api.log" 2>&1 &
pids+=($!)

alive() { kill -0 "$1" 2>/dev/null; }
ready=false
for _ in $(seq 1 300); do
  if curl -fsS -o /dev/null --max-time 1 "http://$probe/readyz" 2>/dev/null; then ready=true; break; fi
  for p in "${pids[@]}"; do
    alive "$p" || { echo "run: a process exited during start; last lines of the logs:" >&2; tail -n 5 "$data/api.log" "$data/worker.log" >&2; exit 1; }
  done
  sleep 0.1
done
$ready || { echo "run: the api was not ready after 30s; see $data/api.log" >&2; curl -sS "http://$probe/readyz" >&2 || true; exit 1; }

cat <<EOF

Tollgate is running (logs: $data/api.log, $data/worker.log). Ctrl-C stops it.

  api          $base
  dashboard    ${dashboard:-$base/dashboard}
  admin        $base/admin
  metrics      $( [ "${METRICS_ADDR:-}" = off ] && echo "(METRICS_ADDR=off)" || echo "http://${METRICS_ADDR:-127.0.0.1:9464}/metrics")$( [ "${WORKER_METRICS_ADDR:-}" = off ] || echo " (worker: http://${WORKER_METRICS_ADDR:-127.0.0.1:9091}/metrics)")
  admin token  $ADMIN_TOKEN
  demo tenant  ${tenant_id:-(seed-demo printed none)}
  demo API key ${api_key:-(seed-demo printed none)}

  For the examples in docs/api.md:
  export ADMIN_TOKEN=$ADMIN_TOKEN API_KEY=${api_key:-<api key>} T=${tenant_id:-<tenant id>}

  curl -H "Authorization: Bearer ${api_key:-<api key>}" -H 'Content-Type: application/json' -d '{"cost":1}' $base/v1/check
  curl -H "Authorization: Bearer ${api_key:-<api key>}" $base/v1/entitlements
  curl -H "Authorization: Bearer $ADMIN_TOKEN" $base/admin/v1/tenants

EOF

# Wait until either child exits (or a signal arrives); then stop the other.
set +e
wait -n "${pids[@]}"
code=$?
set -e
if [ "$code" = 0 ]; then
  # api and worker exit 0 only after a signal: Ctrl-C reaches them (the
  # terminal signals the whole process group) as it reaches us. A stop, not
  # a crash.
  exit 0
fi
echo "run: a process exited (status $code); see $data/api.log and $data/worker.log" >&2
exit "$code"
