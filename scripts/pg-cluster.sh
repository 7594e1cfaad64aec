# pg-cluster.sh (sourced): start a throwaway PostgreSQL cluster like
# ledger/storetest/pgtest's (initdb into a temporary directory, listening
# only on a Unix socket there, as the unprivileged user postgres when run
# as root), stopped by pg_cluster_stop. Sets PG_DIR and PG_DSN (a libpq
# URL of database "ledger"). PG_DURABLE=1 keeps fsync and
# synchronous_commit on (the default is pgtest's fsync=off); PG_OPTS adds
# server options (e.g. "-c shared_preload_libraries=pg_stat_statements").
pg_cluster_start() {
  local bin; bin=$(dirname "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | tail -1)")
  PG_DIR=$(mktemp -d /tmp/ledger-pg-XXXXXX); chmod 755 "$PG_DIR"
  local as=(); [ "$(id -u)" = 0 ] && { chown postgres "$PG_DIR"; as=(runuser -u postgres --); }
  local port; port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  "${as[@]}" "$bin/initdb" -D "$PG_DIR/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$PG_DIR/initdb.log"
  local opts="-c listen_addresses= -k $PG_DIR -p $port -c max_connections=400 -c shared_buffers=256MB"
  [ -n "${PG_OPTS:-}" ] && opts="$opts $PG_OPTS"
  [ "${PG_DURABLE:-0}" = 1 ] || opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  "${as[@]}" "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -o "$opts" -w start >/dev/null
  PG_STOP=("${as[@]}" "$bin/pg_ctl" -D "$PG_DIR/data" -m fast -w stop)
  "${as[@]}" psql -h "$PG_DIR" -p "$port" -U postgres -qc 'CREATE DATABASE ledger' postgres
  PG_DSN="postgres://postgres@/ledger?host=$PG_DIR&port=$port"
}
pg_cluster_stop() { [ -n "${PG_DIR:-}" ] || return 0; "${PG_STOP[@]}" >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; }
