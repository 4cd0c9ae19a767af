#!/usr/bin/env bash
# Start a throwaway PostgreSQL cluster for the test suite (the trace store's Postgres backend is
# tested against a real server, not a mock).
#
#   eval "$(.ci/postgres.sh)"          # exports AUTOMETRICS_TEST_POSTGRES_URL and _DIR
#   .ci/postgres.sh stop "$AUTOMETRICS_TEST_POSTGRES_DIR"
#
# Installs Debian's `postgresql` package if no server binaries are found (needs root + apt).
# The cluster lives in a fresh temp dir, is owned by the `postgres` user when run as root
# (PostgreSQL refuses to run as root), listens on 127.0.0.1 only, on a free port, with trust
# authentication (loopback, throwaway data).  Only the export lines go to stdout.
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

if [ "${1:-}" = "stop" ]; then
  dir="${2:?usage: postgres.sh stop DIR}"
  bin="$(cat "$dir/bindir")"
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast stop >&2 || true
  else "$bin/pg_ctl" -D "$dir/data" -m fast stop >&2 || true; fi
  rm -rf "$dir"
  exit 0
fi

find_bindir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

bindir="$(find_bindir || true)"
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  if [ "$(id -u)" != 0 ]; then
    log "PostgreSQL server binaries not found and not root: install the 'postgresql' package"
    exit 1
  fi
  log "installing Debian's postgresql package"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  bindir="$(find_bindir)"
fi

dir="$(mktemp -d /tmp/autometrics-pg.XXXXXX)"
echo "$bindir" > "$dir/bindir"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/false postgres
  chown postgres: "$dir"
  chmod 700 "$dir"
fi
user="$(as_owner id -un)"

as_owner "$bindir/initdb" -D "$dir/data" -U "$user" --auth=trust --encoding=UTF8 --no-locale >/dev/null
as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=on -c max_connections=50" start >&2
as_owner "$bindir/createdb" -h 127.0.0.1 -p "$port" -U "$user" autometrics_test

url="postgresql+psycopg://$user@127.0.0.1:$port/autometrics_test"
log "$("$bindir/postgres" --version) ready at $url (data in $dir)"
echo "export AUTOMETRICS_TEST_POSTGRES_URL='$url'"
echo "export AUTOMETRICS_TEST_POSTGRES_DIR='$dir'"
