#!/usr/bin/env bash
# Scheduled sends measured: a million jobs due at the same moment, drained by one worker, against
# a plain stream backlog of the same size (see Benchmarks/README.md, "Scheduled sends").
#
# Each case: a private redis-server on a free port, Herald's APNs emulator and one `herald worker`.
# "stream" enqueues N jobs with `herald enqueue --count`; "scheduled" puts N members due now into
# the queue's scheduled set with one ZADD pipeline (members as the worker writes them). The clock
# runs from the worker's start until the emulator accepted all N.
#
# Usage: Benchmarks/scheduled-drain.sh [options]
#   --n N            notifications per case                      (default 1000000)
#   --runs K         rounds of both cases, alternating           (default 1)
#   --herald PATH    the herald binary (default: swift build -c release --static-swift-stdlib, incremental)
#   --no-build       use .build/release/herald as it is
#   --keep           keep the temporary directory (logs)
# Prints a Markdown table (progress on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

N=1000000
RUNS=1
HERALD=""
BUILD=1
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --n) N="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --herald) HERALD="$2"; BUILD=0; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
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
exec python3 Benchmarks/tools/scheduled_drain.py --herald "$HERALD" --n "$N" --runs "$RUNS" --keep "$KEEP"
