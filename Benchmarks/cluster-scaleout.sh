#!/usr/bin/env bash
# Scale-out measured: what Redis spends per notification when Herald drains one queue on one
# redis-server, against the same load as shards on that one redis-server, on a local Redis
# Cluster of 3 masters and 3 replicas, and on 3 masters alone; then a projection to 1,000,000
# notifications/s on a larger cluster.
#
# Each case: a private Redis (or cluster) on free ports, Herald's APNs emulator, a backlog of N
# notifications enqueued with `herald enqueue` (--shards on the cluster), then W `herald worker`
# processes drain it. Redis CPU is read from /proc/PID/stat (utime + stime) of every redis-server
# before and after the drain, and divided by the notifications drained; the workers' CPU the same
# way. Enqueueing is measured apart (XADD cost), so the drain figure is the queue's own cost:
# XREADGROUP, XACK and XDEL in MULTI/EXEC (and on the cluster, replication to the replicas).
#
# Usage: Benchmarks/cluster-scaleout.sh [options]
#   --n N            notifications per case                      (default 300000)
#   --shards S       shards on the cluster                       (default 6)
#   --queue Q        the shards' base name (Q-0 … Q-(S-1))      (default alerts: 2 per master for S=6)
#   --workers W      worker processes per case                   (default 2)
#   --runs K         rounds of both cases, alternating           (default 1)
#   --herald PATH    the herald binary (default: swift build -c release --static-swift-stdlib, incremental)
#   --no-build       use .build/release/herald as it is
#   --keep           keep the temporary directory (logs)
# Prints a Markdown table (progress on stderr). See Benchmarks/README.md ("Scale-out on Redis Cluster").
set -euo pipefail
cd "$(dirname "$0")/.."

N=300000
SHARDS=6
WORKERS=2
RUNS=1
QUEUE=alerts
HERALD=""
BUILD=1
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --n) N="$2"; shift 2 ;;
        --shards) SHARDS="$2"; shift 2 ;;
        --workers) WORKERS="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --queue) QUEUE="$2"; shift 2 ;;
        --herald) HERALD="$2"; BUILD=0; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for tool in redis-server redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: run make deps" >&2; exit 1; }
done
if [ -z "$HERALD" ]; then
    if [ "$BUILD" = 1 ]; then
        echo "building herald (release) …" >&2
        swift build -c release --static-swift-stdlib --product herald >&2
    fi
    HERALD=.build/release/herald
fi
exec python3 Benchmarks/tools/cluster_scaleout.py --herald "$HERALD" --n "$N" --shards "$SHARDS" \
    --workers "$WORKERS" --runs "$RUNS" --queue "$QUEUE" --keep "$KEEP"
