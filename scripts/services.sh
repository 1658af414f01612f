#!/usr/bin/env bash
# Makes sure Postgres and Redis answer at DATABASE_URL and REDIS_URL (or the
# defaults). In order: use what already answers; else start throwaway servers
# from locally installed PostgreSQL and Redis binaries under TOLLGATE_DATA
# (default .data/ in the checkout); else `docker compose up -d postgres redis`.
#
#   scripts/services.sh [start]  as above
#   scripts/services.sh stop     stop the throwaway servers this script started
#                                (`make run` does it on Ctrl-C); others are left alone
#   scripts/services.sh clean    stop them and delete their data (`make clean`)
#
# What was started is written to $data/services, so that stop and clean find
# it again and never touch a server they did not start.
set -euo pipefail
cd "$(dirname "$0")/.."

DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
data=${TOLLGATE_DATA:-$PWD/.data}
state=$data/services

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

# as_owner runs a Postgres binary: as the caller, or as the postgres user
# when the caller is root (initdb and postgres refuse to run as root).
owner=()
[ "$(id -u)" = 0 ] && owner=(runuser -u postgres --)
as_owner() { "${owner[@]}" "$@"; }

# state_get KEY: the value recorded for KEY in $state ("" if none).
state_get() { [ -f "$state" ] && sed -n "s/^$1=//p" "$state" | tail -n 1 || true; }
state_put() { mkdir -p "$data"; { grep -v "^$1=" "$state" 2>/dev/null || true; echo "$1=$2"; } >"$state.tmp"; mv "$state.tmp" "$state"; }
state_del() { [ -f "$state" ] || return 0; { grep -v "^$1=" "$state" || true; } >"$state.tmp"; mv "$state.tmp" "$state"; }

stop() {
  local pgdata rdpid bin
  pgdata=$(state_get postgres)
  # A data folder of a version of this script that kept no state.
  [ -z "$pgdata" ] && [ -s "$data/postgres/postmaster.pid" ] && pgdata=$data/postgres
  if [ -n "$pgdata" ]; then
    if [ -s "$pgdata/postmaster.pid" ] && bin=$(pg_bin); then
      echo "services: stopping the throwaway PostgreSQL ($pgdata)"
      as_owner "$bin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null 2>&1 || true
    fi
    state_del postgres
  fi
  rdpid=$(state_get redis)
  if [ -n "$rdpid" ]; then
    if kill -0 "$rdpid" 2>/dev/null && [ "$(cat "/proc/$rdpid/comm" 2>/dev/null)" = redis-server ]; then
      echo "services: stopping the throwaway Redis (pid $rdpid)"
      kill -TERM "$rdpid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$rdpid" 2>/dev/null || break; sleep 0.1; done
    fi
    state_del redis
  fi
}

case "${1:-start}" in
  start) ;;
  stop) stop; exit 0 ;;
  clean)
    stop
    # The Postgres data may live outside $data (see below); it goes too.
    for d in "$data"/postgres.dir; do [ -f "$d" ] && rm -rf "$(cat "$d")"; done
    rm -rf "$data"
    exit 0 ;;
  *) echo "usage: scripts/services.sh [start|stop|clean]" >&2; exit 2 ;;
esac

if ! pg_up; then
  if bin=$(pg_bin); then
    mkdir -p "$data"
    pgdata=$data/postgres
    if [ ${#owner[@]} -gt 0 ]; then
      id postgres >/dev/null 2>&1 || { echo "services: running as root without a postgres user" >&2; exit 1; }
      # A checkout under /root (mode 700, as in many containers) is out of
      # the postgres user's reach: keep its data in a folder of its own
      # under /tmp instead, named after $data so that each checkout keeps
      # one, and remember where (clean deletes it).
      if ! runuser -u postgres -- test -x "$data" 2>/dev/null; then
        if [ -s "$data/postgres.dir" ]; then
          pgdata=$(cat "$data/postgres.dir")
        else
          pgdata=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-postgres.XXXXXX")
          echo "$pgdata" >"$data/postgres.dir"
        fi
      fi
      mkdir -p "$pgdata"
      chown postgres "$pgdata"
      chmod 700 "$pgdata"
    fi
    echo "services: starting a throwaway PostgreSQL on $pg_host:$pg_port under $pgdata"
    if [ ! -s "$pgdata/PG_VERSION" ]; then
      as_owner "$bin/initdb" -D "$pgdata" -U postgres --auth=trust >/dev/null
    fi
    # The log sits in the data folder, which its owner can write.
    as_owner "$bin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w \
      -o "-h $pg_host -p $pg_port -k /tmp" start >/dev/null
    state_put postgres "$pgdata"
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
      --dir "$data/redis" --logfile "$data/redis.log" --pidfile "$data/redis.pid" >/dev/null
    for _ in $(seq 1 50); do [ -s "$data/redis.pid" ] && break; sleep 0.1; done
    state_put redis "$(cat "$data/redis.pid")"
    wait_for redis redis_up
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker compose up -d --wait redis
  else
    echo "services: Redis does not answer at $rd_host:$rd_port and none can be started" >&2
    exit 1
  fi
fi
echo "services: postgres at $pg_host:$pg_port and redis at $rd_host:$rd_port answer"
