#!/bin/bash
# The sharded-set grid of docs/benchmarks.md ("Sharded sets at scale"):
# `tenure bench --shards N --members M` for every M:N:TERM given, on each
# store of scripts/servers.sh that lists by prefix, one process per member.
# Each run's JSON goes to OUT/STORE_mM_nN_tTERM.json (its log beside it, .err);
# a run already there is not repeated. Print the tables with
# `python3 scripts/shard-grid-table.py OUT`.
#
#   bash scripts/servers.sh start
#   bash scripts/bench-shard-grid.sh OUT 4:64:2s 16:1024:2s 64:10000:10s ...
#
# TENURE (default: target/release/tenure) is the binary; STORES (default:
# "redis postgres etcd nats zk sqlite") the stores.
set -u
out=${1:?usage: bench-shard-grid.sh OUT M:N:TERM...}
shift
tenure=${TENURE:-target/release/tenure}
stores=${STORES:-redis postgres etcd nats zk sqlite}
set -a
# shellcheck disable=SC1091
. "${TENURE_SERVERS_DIR:-/tmp/tenure-servers}/env"
set +a
mkdir -p "$out"
for spec in "$@"; do
  IFS=: read -r members shards term <<<"$spec"
  for store in $stores; do
    case $store in
      redis) url=$TENURE_TEST_REDIS ;;
      postgres) url=$TENURE_TEST_POSTGRES ;;
      etcd) url="etcd://${TENURE_TEST_ETCD#http://}" ;;
      nats) url=$TENURE_TEST_NATS/bench ;;
      zk) url=$TENURE_TEST_ZOOKEEPER ;;
      sqlite)
        rm -f "$out"/shards.db*
        url=sqlite://$(realpath "$out")/shards.db
        ;;
      *) echo "unknown store $store" >&2; exit 2 ;;
    esac
    base=$out/${store}_m${members}_n${shards}_t${term}
    [ -s "$base.json" ] && continue
    echo "== $(date +%T) $store: $shards shards over $members members, term $term" >&2
    RUST_LOG=error timeout 1200 "$tenure" bench --shards "$shards" --members "$members" \
      --rounds 1 --term "$term" --json --store "$url" >"$base.json.tmp" 2>"$base.err"
    echo "exit $?" >>"$base.err"
    mv "$base.json.tmp" "$base.json"
  done
done
