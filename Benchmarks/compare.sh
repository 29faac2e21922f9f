#!/usr/bin/env bash
# Herald against the HTTP/2 ceiling and against a peer client: one run, one machine, one
# emulator per latency, identical notifications.
#
#   1. h2load              the same requests, no queue: this machine's HTTP/2 ceiling
#   2. herald (worker)     `herald loadgen` in drain mode: a pre-filled Redis backlog drained by
#                          `herald worker` process(es), attached to the same emulator
#   3. aioapns (PyPI)      an established Python APNs client, as fast as its API allows
#                          (Benchmarks/peers/aioapns_send.py, in Benchmarks/.venv)
# then the rates and ratios (Herald / h2load, Herald / peer); throughput as the emulator's
# latency grows, against min(CPU limit, connections x streams / RTT); 1 vs 2 worker processes.
# Markdown on stdout, progress on stderr. See Benchmarks/README.md ("Comparison").
#
# Usage: Benchmarks/compare.sh [options]
#   --sections LIST     any of peers,workers,latency          (default: all three)
#   --n N               notifications per h2load / Herald run   (default 500000)
#   --runs K            rounds at latency 0, order rotated      (default 3)
#   --peer-n N          notifications per peer run              (default 20000)
#   --peer-streams LIST peer in-flight per connection, each a run (default STREAMS,50: the
#                       identical setting, and one where aioapns is faster)
#   --peer-max-seconds S  a peer run stops starting notifications after S s (default 15)
#   --latencies LIST    emulator latencies, ms, for the sweep    (default 0,5,20,40)
#   --sweep-runs K      runs per latency above 0, alternating, each paired with a 0 ms run (default 2)
#   --connections C     HTTP/2 connections, every client        (default 4)
#   --streams M         concurrent streams per connection       (default 1000)
#   --payload-bytes B   body size, exactly                      (default 256)
#   --tokens T          distinct device tokens, h2load and Herald alike (default 10000, loadgen's
#                       default): h2load cycles through T request paths (-i), Herald's loadgen
#                       enqueues to T tokens; the peer always sends one
#   --aioapns-version V the peer's version, pinned              (default 4.0)
#   --quick             N=20000, runs 1, peer-n 3000, peer-max-seconds 5, latencies 0,20: ~20 s
#   --json FILE         also write every run and the summary as JSON
#   --herald PATH       the herald binary (default: swift build -c release --static-swift-stdlib, incremental)
#   --label TEXT        what the binary was built from, for the conditions (e.g. a commit)
#   --no-build          use .build/release/herald as it is
#   --keep              keep the temporary directory (logs, loadgen reports)
set -euo pipefail

SECTIONS="peers,workers,latency"
N=500000
RUNS=3
PEER_N=20000
PEER_STREAMS=""
PEER_MAX_SECONDS=15
LATENCIES="0,5,20,40"
SWEEP_RUNS=2
CONNECTIONS=4
STREAMS=1000
PAYLOAD_BYTES=256
TOKENS=10000
AIOAPNS_VERSION=4.0
JSON_OUT=""
HERALD_PATH=""
LABEL=""
BUILD=1
KEEP_WORK=0

usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --sections) SECTIONS="$2"; shift 2 ;;
        --n) N="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --peer-n) PEER_N="$2"; shift 2 ;;
        --peer-streams) PEER_STREAMS="$2"; shift 2 ;;
        --peer-max-seconds) PEER_MAX_SECONDS="$2"; shift 2 ;;
        --latencies) LATENCIES="$2"; shift 2 ;;
        --sweep-runs) SWEEP_RUNS="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --streams) STREAMS="$2"; shift 2 ;;
        --payload-bytes) PAYLOAD_BYTES="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --aioapns-version) AIOAPNS_VERSION="$2"; shift 2 ;;
        --quick) N=20000; RUNS=1; SWEEP_RUNS=1; PEER_N=3000; PEER_MAX_SECONDS=5; LATENCIES="0,20"; shift ;;
        --json) JSON_OUT="$2"; shift 2 ;;
        --herald) HERALD_PATH="$2"; shift 2 ;;
        --label) LABEL="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --keep) KEEP_WORK=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 64 ;;
    esac
done
for v in N RUNS PEER_N CONNECTIONS STREAMS PAYLOAD_BYTES SWEEP_RUNS TOKENS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "${v,,} must be a positive integer, got '${!v}'" >&2; exit 64; }
done
[ -n "$PEER_STREAMS" ] || PEER_STREAMS="$STREAMS,50"
[[ "$PEER_STREAMS" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "--peer-streams takes numbers, e.g. 1000,50" >&2; exit 64; }
[[ "$LATENCIES" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "--latencies takes numbers of ms, e.g. 0,5,20,40" >&2; exit 64; }
[[ "$PEER_MAX_SECONDS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "--peer-max-seconds must be a number" >&2; exit 64; }
has_section() { [[ ",$SECTIONS," == *",$1,"* ]]; }
for s in ${SECTIONS//,/ }; do
    case "$s" in peers|workers|latency) ;; *) echo "unknown section '$s' (peers, workers, latency)" >&2; exit 64 ;; esac
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="$ROOT/Benchmarks/tools"
VENV="$ROOT/Benchmarks/.venv"
cd "$ROOT"
# shellcheck source=tools/common.sh
. "$TOOLS/common.sh"

# --- tools ---------------------------------------------------------------------------------
bench_require_h2load
bench_find_python
command -v redis-server >/dev/null || { echo "redis-server not found: run 'make deps'" >&2; exit 69; }
bench_resolve_herald "$BUILD" "$HERALD_PATH"

# The peer: aioapns from PyPI, pinned, in Benchmarks/.venv (gitignored).
PEER_PY=""
if has_section peers; then
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating $VENV (python3 -m venv)"
        python3 -m venv "$VENV" >&2 || { echo "python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 69; }
    fi
    if [ "$("$VENV/bin/python" "$ROOT/Benchmarks/peers/aioapns_send.py" --version 2>/dev/null || true)" != "$AIOAPNS_VERSION" ]; then
        log "pip install aioapns==$AIOAPNS_VERSION into $VENV"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "aioapns==$AIOAPNS_VERSION" >&2
    fi
    PEER_PY="$VENV/bin/python"
fi

bench_make_workdir herald-compare
"$PYTHON" "$TOOLS/make-payload.py" "$PAYLOAD_BYTES" "$WORK/payload.json"
# h2load's request paths: as many distinct device tokens as Herald's jobs go to (one path is
# indexed by HPACK after the first request; thousands are sent and decoded literally each time).
H2LOAD_TOKENS="$TOKENS"
RESULTS="$WORK/results.tsv"
: >"$RESULTS"

# --- one run of each client ----------------------------------------------------------------
# Each prints "rate seconds ok not_ok detail" and leaves "client_cpu_s" in $WORK/cpu.

run_h2load() {  # TAG N
    bench_run_h2load "$1" "$2"
    bench_client_cpu "$WORK/h2load.$1.out.time" >"$WORK/cpu"
}

# herald loadgen, drain mode, attached to the running emulator; its own private redis-server.
run_herald() {  # TAG N WORKERS
    local tag="$1" n="$2" workers="$3" rc=0 out="$WORK/loadgen.$1"
    HERALD_TEAM_ID="$TEAM_ID" HERALD_KEY_ID="$KEY_ID" HERALD_KEY_FILE="$WORK/key.p8" HERALD_BUNDLE_ID="$BUNDLE_ID" \
        "$BIN" loadgen --notifications "$n" --workers "$workers" --connections "$CONNECTIONS" \
        --max-streams "$STREAMS" --payload-bytes "$PAYLOAD_BYTES" --tokens "$TOKENS" \
        --apns-host 127.0.0.1 --apns-port "$PORT" --ca-file "$WORK/ca.pem" --apns-stats "127.0.0.1:$STATS_PORT" \
        --queue "compare-$tag" --timeout $((120 + n / 1000)) --json "$out.json" \
        >"$out.txt" 2>&1 </dev/null &
    bench_watch_client $! || rc=$?
    "$PYTHON" - "$out.json" "$n" "$rc" "$WORK/cpu" <<'PY'
import json, sys
path, n, rc, cpu_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    r = json.load(open(path))
except (OSError, ValueError):
    open(cpu_file, "w").write("0\n")
    sys.stderr.write(open(path.replace(".json", ".txt")).read() if path else "")
    print(f"0 0 0 {n} loadgen_failed,exit={rc}"); sys.exit()
o, w, other = r["outcomes"], r["workers"], r.get("other_processes", {})
ok = o["accepted"]
rate = ok / r["wall_seconds"] if r["wall_seconds"] else 0
open(cpu_file, "w").write(f"{w['cpu_seconds']:.2f}\n")
detail = (f"exit={rc},lost={o['lost']},duplicated={o['duplicated']},dead_lettered={o['dead_lettered']},"
          f"apns_rejections={o['apns_rejections']},enqueue_s={r['enqueue_seconds']:.2f},"
          f"peak_rss_mb={w['peak_vmhwm_bytes'] / 1e6:.1f},redis_cpu_s={other.get('redis_server_cpu_seconds', 0):.2f},"
          f"loadgen_cpu_s={other.get('loadgen_cpu_seconds', 0):.2f}" + (",TIMED_OUT" if r["timed_out"] else ""))
print(f"{rate:.0f} {r['wall_seconds']:.3f} {ok} {n - ok} {detail}")
PY
}

run_peer() {  # TAG N STREAMS_PER_CONNECTION
    local tag="$1" out="$WORK/peer.$1" rc=0 TIMEFORMAT='%R %U %S'
    local timeout
    timeout="$(awk -v s="$PEER_MAX_SECONDS" 'BEGIN{print int(s * 4 + 60)}')"
    { time "$PEER_PY" "$ROOT/Benchmarks/peers/aioapns_send.py" --host 127.0.0.1 --port "$PORT" \
        --ca-file "$WORK/ca.pem" --key "$WORK/key.p8" --team-id "$TEAM_ID" --key-id "$KEY_ID" \
        --topic "$BUNDLE_ID" --token "$DEVICE_TOKEN" --payload-file "$WORK/payload.json" \
        --payload-bytes "$PAYLOAD_BYTES" --n "$2" --warmup $(( $2 / 10 > 100 ? $2 / 10 : 100 )) \
        --connections "$CONNECTIONS" --streams "$3" --max-seconds "$PEER_MAX_SECONDS" \
        --timeout "$timeout" --json "$out.json" >"$out.txt" 2>"$out.err" </dev/null ; } 2>"$out.time" &
    bench_watch_client $! || rc=$?
    "$PYTHON" - "$out.json" "$2" "$rc" "$WORK/cpu" "$out.err" <<'PY'
import json, sys
path, n, rc, cpu_file, err = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
try:
    r = json.load(open(path))
except (OSError, ValueError):
    open(cpu_file, "w").write("0\n")
    sys.stderr.write(open(err).read()[-2000:])
    print(f"0 0 0 {n} peer_failed,exit={rc}"); sys.exit()
open(cpu_file, "w").write(f"{r['cpu_seconds']:.2f}\n")
others = ",".join(f"{k}={v}" for k, v in sorted(r["statuses"].items()) if k != "200")
detail = (f"exit={rc},sent={r['sent']},in_flight={r['in_flight_limit']},connections={r['connections']},"
          f"stream_bounds={'/'.join(map(str, r['stream_bounds']))},pool_busy_waits={r['pool_busy_waits']},"
          f"flow_control_retries={r['flow_control_retries']}" + (f",{others}" if others else "")
          + (",TIMED_OUT" if r["timed_out"] else ",stopped_at_max_seconds" if r["sent"] < r["n"] else ""))
print(f"{r['rate']:.0f} {r['seconds']:.3f} {r['ok']} {r['sent'] - r['ok']} {detail}")
PY
}

# measure SECTION LATENCY TOOL RUN N ARG: one run with the emulator's CPU and counts around it.
measure() {
    local section="$1" latency="$2" tool="$3" run="$4" n="$5" arg="$6" tag
    tag="$section-$latency-$tool-$run"
    local before ticks load_before line emu_cpu after delta
    bench_forget_ids
    before="$(bench_stats_now)"
    ticks="$(bench_emu_ticks)"
    load_before="$(bench_loadavg | cut -d' ' -f1)"
    log "[$section] latency ${latency} ms, run $run: $tool (N=$n)"
    case "$tool" in
        h2load) line="$(run_h2load "$tag" "$n")" ;;
        herald-*w) line="$(run_herald "$tag" "$n" "$arg")" ;;
        aioapns-*) line="$(run_peer "$tag" "$n" "$arg")" ;;
    esac
    emu_cpu="$(bench_ticks_to_seconds "$ticks" "$(bench_emu_ticks)")"
    after="$(bench_stats_now)"
    delta="$(bench_stats_delta "$before" "$after")"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$section" "$latency" "$tool" "$run" "$n" "$line" \
        "$(cat "$WORK/cpu")" "$emu_cpu" "$delta" "$load_before $(bench_loadavg | cut -d' ' -f1)" >>"$RESULTS"
    log "  $tool: ${line%% *}/s  ($line)  emulator: $delta, cpu ${emu_cpu}s"
}

# --- conditions ------------------------------------------------------------------------------
bench_conditions
LOAD_BEFORE="$(bench_loadavg)"
START_SECONDS=$SECONDS
PEER_VERSION=""
[ -z "$PEER_PY" ] || PEER_VERSION="aioapns $("$PEER_PY" "$ROOT/Benchmarks/peers/aioapns_send.py" --version), $("$PEER_PY" -c 'import sys, h2; print("Python", sys.version.split()[0], "+ h2", h2.__version__)')"
REDIS_VERSION="$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
log "herald: $BIN${LABEL:+ ($LABEL)}; N=$N, runs $RUNS, ${CONNECTIONS}x${STREAMS}, ${PAYLOAD_BYTES} B, sections $SECTIONS"

# --- latency 0: h2load and Herald (1 and 2 workers) rotated, then the peer's rounds -----------
# The peer runs after the h2load/Herald rounds, not between them: a 15-20 s pure-Python burn of
# one core left the next runs of both h2load and Herald slower on this VM (the emulator itself
# was idle afterwards), so interleaving it made the h2load/Herald ratio depend on run order.
TOOLS_AT_ZERO=(h2load herald-1w)
has_section workers && TOOLS_AT_ZERO+=(herald-2w)
PEER_TOOLS=()
if has_section peers; then for s in ${PEER_STREAMS//,/ }; do PEER_TOOLS+=("aioapns-$s"); done; fi
tool_arg() {
    case "$1" in
        herald-*w) local w="${1#herald-}"; echo "${w%w}" ;;
        aioapns-*) echo "${1#aioapns-}" ;;
        *) echo - ;;
    esac
}
tool_n() { case "$1" in aioapns-*) echo "$PEER_N" ;; *) echo "$N" ;; esac; }

# Each measured run starts with bench_forget_ids, so the emulator's apns-id table holds one
# run's ids at most (N; the warm-up's are forgotten too): room for that, not for every run.
EXPECT_IDS=$(( N * 5 / 4 ))
bench_start_emulator lat0 --stats-port 0 --latency-ms 0
# Warm-up, not counted: the first TLS handshakes, page cache, the venv's imports.
log "warm-up (not counted)"
run_h2load warmup-h2load $(( N / 10 > CONNECTIONS ? N / 10 : CONNECTIONS )) >/dev/null
run_herald warmup-herald $(( N / 10 > 1000 ? N / 10 : 1000 )) 1 >/dev/null
for tools in "${TOOLS_AT_ZERO[*]}" "${PEER_TOOLS[*]}"; do
    read -r -a group <<<"$tools"
    count=${#group[@]}
    [ "$count" -gt 0 ] || continue
    for run in $(seq "$RUNS"); do
        for i in $(seq 0 $((count - 1))); do
            tool="${group[$(( (i + run - 1) % count ))]}"
            measure main 0 "$tool" "$run" "$(tool_n "$tool")" "$(tool_arg "$tool")"
        done
    done
done
bench_stop_emulator

# --- the latency sweep: h2load and Herald (1 worker), each run paired with one at 0 ms ---------
# This VM's speed drifts by a third within minutes, so a latency-L run is compared with a 0 ms
# run of the same client taken right next to it, on the same emulator (its latency is switched
# between the two through /_herald/latency/MS), not with the latency-0 rounds minutes earlier.
set_latency() {
    curl -s --max-time 10 "http://127.0.0.1:$STATS_PORT/_herald/latency/$1" >/dev/null \
        || { echo "could not set the emulator's latency to $1 ms" >&2; exit 70; }
}
if has_section latency; then
    bench_start_emulator sweep --stats-port 0 --latency-ms 0
    for latency in ${LATENCIES//,/ }; do
        [ "$latency" = 0 ] && continue  # latency 0 is the main rounds above
        for run in $(seq "$SWEEP_RUNS"); do
            if [ $((run % 2)) = 1 ]; then order="h2load herald-1w"; else order="herald-1w h2load"; fi
            for tool in $order; do
                # Alternate which of the pair goes first, too.
                if [ $((run % 2)) = 1 ]; then pair="ref $latency"; else pair="$latency ref"; fi
                for which in $pair; do
                    if [ "$which" = ref ]; then
                        set_latency 0
                        measure latency-ref "$latency" "$tool" "$run" "$N" "$(tool_arg "$tool")"
                    else
                        set_latency "$latency"
                        measure latency "$latency" "$tool" "$run" "$N" "$(tool_arg "$tool")"
                    fi
                done
            done
        done
    done
    bench_stop_emulator
fi
LOAD_AFTER="$(bench_loadavg)"
ELAPSED=$((SECONDS - START_SECONDS))

# --- report ----------------------------------------------------------------------------------
export CMP_CPU_MODEL="$CPU_MODEL" CMP_NPROC="$NPROC" CMP_SWIFT="$SWIFT_VERSION" CMP_H2LOAD="$H2LOAD_VERSION" \
    CMP_COMMIT="$COMMIT$DIRTY" CMP_LABEL="$LABEL" CMP_BIN="$BIN" CMP_PEER="$PEER_VERSION" CMP_REDIS="$REDIS_VERSION" \
    CMP_LOAD_BEFORE="$LOAD_BEFORE" CMP_LOAD_AFTER="$LOAD_AFTER" CMP_ELAPSED="$ELAPSED" CMP_N="$N" CMP_RUNS="$RUNS" \
    CMP_PEER_N="$PEER_N" CMP_PEER_MAX_SECONDS="$PEER_MAX_SECONDS" CMP_CONNECTIONS="$CONNECTIONS" CMP_STREAMS="$STREAMS" \
    CMP_PAYLOAD="$PAYLOAD_BYTES" CMP_TOKENS="$TOKENS" CMP_LATENCIES="$LATENCIES" CMP_SECTIONS="$SECTIONS" CMP_SWEEP_RUNS="$SWEEP_RUNS"
"$PYTHON" "$TOOLS/compare-report.py" "$RESULTS" "$JSON_OUT"
