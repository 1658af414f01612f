#!/usr/bin/env bash
# Makes sure Postgres and Redis answer at DATABASE_URL and REDIS_URL (or the
# defaults). In order: use what already answers; else start throwaway servers
# from locally installed PostgreSQL and Redis binaries under .data/ in the
# checkout; else `docker compose up -d postgres redis`.
set -euo pipefail
cd "$(dirname "$0")/.."

DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
data=${TOLLGATE_DATA:-$PWD/.data}

# host and port out of a URL like scheme://user@host:port/db
hostport() { local u=${1#*://}; u=${u#*@}; u=${u%%/*}; u=${u%%\?*}; echo "$u"; }
pg_hp=$(hostport "$DATABASE_URL"); pg_host=${pg_hp%:*}; pg_port=${pg_hp##*:}
rd_hp=$(hostport "$REDIS_URL"); rd_host=${rd_hp%:*}; rd_port=${rd_hp##*:}

pg_up() { (exec 3<>"/dev/tcp/$pg_host/$pg_port") 2>/dev/null && { command -v pg_isready >/dev/null && pg_isready -q -h "$pg_host" -p "$pg_port" -t 2 || true; }; }
redis_up() {
  if command -v redis-cli >/dev/null; then redis-cli -h "$rd_host" -p "$rd_port" ping 2>/dev/null | grep -q PONG
  else (exec 3<>"/dev/tcp/$rd_host/$rd_port") 2>/dev/null; fi
}
wait_for() { local what=$1 check=$2; for _ in $(seq 1 100); do $check && return 0; sleep 0.1; done; echo "services: $what did not come up" >&2; return 1; }

pg_bin() {
  for d in "$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/x)")" /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

if ! pg_up; then
  if bin=$(pg_bin); then
    echo "services: starting a throwaway PostgreSQL on $pg_host:$pg_port under $data/postgres"
    mkdir -p "$data"
    owner=()
    if [ "$(id -u)" = 0 ]; then
      # initdb refuses to run as root: run it as the postgres user if there is one.
      id postgres >/dev/null 2>&1 || { echo "services: running as root without a postgres user" >&2; exit 1; }
      chown postgres "$data"; owner=(runuser -u postgres --)
    fi
    if [ ! -s "$data/postgres/PG_VERSION" ]; then
      "${owner[@]}" "$bin/initdb" -D "$data/postgres" -U postgres --auth=trust >/dev/null
    fi
    "${owner[@]}" "$bin/pg_ctl" -D "$data/postgres" -l "$data/postgres.log" -w \
      -o "-h $pg_host -p $pg_port -k /tmp" start >/dev/null
    wait_for postgres pg_up
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker compose up -d --wait postgres
  else
    echo "services: PostgreSQL does not answer at $pg_host:$pg_port and none can be started (no local binaries, no docker)" >&2
    exit 1
  fi
fi

if ! redis_up; then
  if command -v redis-server >/dev/null; then
    echo "services: starting a throwaway Redis on $rd_host:$rd_port"
    mkdir -p "$data/redis"
    redis-server --daemonize yes --bind "$rd_host" --port "$rd_port" --save "" --appendonly no \
      --dir "$data/redis" --logfile "$data/redis.log" >/dev/null
    wait_for redis redis_up
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker compose up -d --wait redis
  else
    echo "services: Redis does not answer at $rd_host:$rd_port and none can be started" >&2
    exit 1
  fi
fi
echo "services: postgres at $pg_host:$pg_port and redis at $rd_host:$rd_port answer"
