#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: `start DIR PORT` makes a cluster in DIR (initdb),
# listening on 127.0.0.1:PORT and a socket in DIR, and prints the connection string;
# `stop DIR` stops it. PostgreSQL refuses to run as root, so the cluster runs as the `postgres`
# user that Debian's package creates. Installs Debian's `postgresql` if it is missing. With
# PG_SSL_CERT and PG_SSL_KEY set (PEM files), `start` also serves TLS with them. With
# PG_HOST_AUTH set (e.g. scram-sha-256), a new cluster asks that of connections over TCP (the
# socket in DIR stays trusted, for the superuser that sets roles up), as a deployment's would.
set -euo pipefail

bin=""
find_bin() {
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
}
find_bin
if [ -z "$bin" ] || ! [ -x "$bin/postgres" ]; then
  apt-get update -qq
  # The package's own cluster may fail to start where there is no init system; only the
  # binaries are needed, so that failure does not count, a missing binary does.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null || true
  find_bin
  if [ -z "$bin" ] || ! [ -x "$bin/postgres" ]; then
    echo "PostgreSQL's server binaries are missing after installing Debian's postgresql" >&2
    exit 1
  fi
fi
as_pg=(runuser -u postgres --)
if [ "$(id -u)" != 0 ]; then as_pg=(); fi

case "${1:-}" in
  start)
    dir=$2 port=$3
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    if ! [ -f "$dir/PG_VERSION" ]; then
      auth=(-A trust)
      if [ -n "${PG_HOST_AUTH:-}" ]; then auth=(--auth-local=trust "--auth-host=$PG_HOST_AUTH"); fi
      "${as_pg[@]}" "$bin/initdb" -D "$dir" -U postgres "${auth[@]}" --no-sync >/dev/null
    fi
    ssl=""
    if [ -n "${PG_SSL_CERT:-}" ]; then
      cp "$PG_SSL_CERT" "$dir/server.crt"
      cp "$PG_SSL_KEY" "$dir/server.key"
      chmod 600 "$dir/server.key"
      [ "$(id -u)" = 0 ] && chown postgres "$dir/server.crt" "$dir/server.key"
      ssl="-c ssl=on"
    fi
    "${as_pg[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on $ssl" start >/dev/null
    echo "host=$dir port=$port user=postgres dbname=postgres"
    ;;
  stop)
    dir=$2
    "${as_pg[@]}" "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  bin)
    echo "$bin"
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR | bin" >&2
    exit 2
    ;;
esac
