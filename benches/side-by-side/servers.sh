#!/usr/bin/env bash
# The servers of the server peers (#30 §2): Postgres and Redis from
# Debian's packages, installed when missing, started on loopback with their
# data in a temp dir, at their defaults; the command given is run with
# SBS_PG_URL and SBS_REDIS_URL set, then both servers are stopped and the
# temp dir removed, also when the command fails or is interrupted.
#
#   benches/side-by-side/servers.sh ./target/release/side-by-side peers \
#       --peers apalis,apalis-postgres,apalis-redis,graphile,effectum ...
#
# Environment: SBS_PG_PORT (default 55432), SBS_REDIS_PORT (56379),
# SBS_SERVERS_DIR (parent of the temp dir; default $TMPDIR or /tmp).
# Needs root for apt-get (only when a package is missing); Postgres runs as
# the `postgres` user the package creates.
set -euo pipefail

pg_port=${SBS_PG_PORT:-55432}
redis_port=${SBS_REDIS_PORT:-56379}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

missing=()
[ -n "$(pg_bin)" ] && [ -x "$(pg_bin)/initdb" ] || missing+=(postgresql)
command -v redis-server >/dev/null || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
  echo "servers.sh: installing ${missing[*]} (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
bin=$(pg_bin)

tmp=$(mktemp -d "${SBS_SERVERS_DIR:-${TMPDIR:-/tmp}}/sbs-servers.XXXXXX")
pg_started=
redis_started=
stop() {
  local rc=$?
  if [ -n "$redis_started" ]; then
    redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 ||
      kill "$(cat "$tmp/redis.pid" 2>/dev/null)" 2>/dev/null || true
  fi
  if [ -n "$pg_started" ]; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/pg" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap stop EXIT
trap 'exit 130' INT TERM

# Postgres: a cluster of its own (initdb's defaults: fsync on,
# synchronous_commit on), trust auth on loopback, its socket in the temp
# dir.
chown postgres: "$tmp"
runuser -u postgres -- "$bin/initdb" -D "$tmp/pg" -U postgres --auth=trust -E UTF8 >"$tmp/initdb.log"
pg_started=1
runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/pg" -l "$tmp/pg.log" -w \
  -o "-p $pg_port -c listen_addresses=127.0.0.1 -k $tmp" start >/dev/null

# Redis: its compiled-in defaults (no AOF; RDB snapshots on its default
# schedule), on loopback, its files in the temp dir.
mkdir "$tmp/redis"
redis_started=1
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$tmp/redis" \
  --daemonize yes --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log"
for _ in $(seq 50); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done

export SBS_PG_URL="postgres://postgres@127.0.0.1:$pg_port/postgres"
export SBS_REDIS_URL="redis://127.0.0.1:$redis_port/?protocol=resp3"
echo "servers.sh: Postgres $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$pg_port, Redis $(redis-server --version | awk '{print $3}' | tr -d v=) on 127.0.0.1:$redis_port, data in $tmp" >&2
"$@"
