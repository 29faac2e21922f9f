#!/usr/bin/env bash
# herald send vs h2load, same emulator, same requests, same run.
#
# Starts ONE `herald mock-apns` (TLS, ES256 JWT checked against the key it writes), then
# alternates K runs of
#   a) h2load -n N -c C -m M  POST /3/device/<token> with the same headers and body
#   b) herald send --count N --connections C --max-streams M
# and prints the median rates, the ratio herald/h2load, the conditions and the
# emulator's counts. See Benchmarks/README.md for what each number means.
#
# Usage: Benchmarks/send-vs-h2load.sh [--n N] [--connections C] [--streams M]
#          [--payload-bytes B] [--runs K] [--warmup W] [--quick] [--json FILE] [--no-build]
#   --n              notifications per run, per tool             (default 200000)
#   --connections    HTTP/2 connections, both tools              (default 4)
#   --streams        max concurrent streams per connection       (default 1000)
#   --payload-bytes  JSON body size, exactly                     (default 256)
#   --runs           runs of each tool, alternating              (default 3)
#   --warmup         untimed requests per tool before the runs   (default N/10; 0: none)
#   --quick          N=20000, runs=1
#   --json FILE      also write the results as JSON
#   --pin            emulator on CPU 0, clients on CPU 1 (taskset); default: no pinning
#   --no-build       use the existing release binary (HERALD_BIN overrides its path)
set -euo pipefail

N=200000
CONNECTIONS=4
STREAMS=1000
PAYLOAD_BYTES=256
RUNS=3
JSON_OUT=""
BUILD=1
WARMUP=""
PIN=0

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --n) N="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --streams) STREAMS="$2"; shift 2 ;;
        --payload-bytes) PAYLOAD_BYTES="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --quick) N=20000; RUNS=1; shift ;;
        --json) JSON_OUT="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --pin) PIN=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 64 ;;
    esac
done
[ -n "$WARMUP" ] || WARMUP=$(( N / 10 > CONNECTIONS ? N / 10 : CONNECTIONS ))
[[ "$WARMUP" =~ ^[0-9]+$ ]] || { echo "--warmup must be a number, got '$WARMUP'" >&2; exit 64; }
[ "$WARMUP" = 0 ] || [ "$WARMUP" -ge "$CONNECTIONS" ] || WARMUP="$CONNECTIONS"
for v in N CONNECTIONS STREAMS PAYLOAD_BYTES RUNS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer, got '${!v}'" >&2; exit 64; }
done
[ "$N" -ge "$CONNECTIONS" ] || { echo "--n must be at least --connections" >&2; exit 64; }

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="$ROOT/Benchmarks/tools"
cd "$ROOT"
# shellcheck source=tools/common.sh
. "$TOOLS/common.sh"

# --- tools, build ----------------------------------------------------------------------
bench_require_h2load
bench_find_python
bench_resolve_herald "$BUILD"

if [ "$PIN" = 1 ]; then
    command -v taskset >/dev/null || { echo "--pin needs taskset (util-linux)" >&2; exit 69; }
    [ "$(nproc)" -ge 2 ] || { echo "--pin needs at least 2 CPUs" >&2; exit 64; }
    EMU_PIN=(taskset -c 0)
    CLIENT_PIN=(taskset -c 1)
fi

# --- emulator, identical requests ------------------------------------------------------
bench_make_workdir send-vs-h2load
log "starting the emulator: herald mock-apns --port 0 --max-streams $STREAMS"
bench_start_emulator main
"$PYTHON" "$TOOLS/make-payload.py" "$PAYLOAD_BYTES" "$WORK/payload.json"
PAYLOAD="$(cat "$WORK/payload.json")"

# --- one run of each tool ------------------------------------------------------------
# Each prints one line: "rate seconds ok failed detail"
run_h2load() { bench_run_h2load "$@"; }

run_herald() {
    local out rc=0 TIMEFORMAT='%R %U %S'
    out="$WORK/herald.$1.out"
    { time "${CLIENT_PIN[@]}" "$BIN" send --apns-host 127.0.0.1 --apns-port "$PORT" --ca-file "$WORK/ca.pem" \
        --key-file "$WORK/key.p8" --team-id "$TEAM_ID" --key-id "$KEY_ID" \
        --bundle-id "$BUNDLE_ID" --token "$DEVICE_TOKEN" --priority "$PRIORITY" \
        --payload "$PAYLOAD" --count "$2" --quiet \
        --connections "$CONNECTIONS" --max-streams "$STREAMS" --timeout $((60 + $2 / 500)) \
        >"$out" 2>&1 </dev/null ; } 2>"$out.time" &
    bench_watch_client $! || rc=$?
    "$PYTHON" - "$out" "$rc" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"sent (\d+), answered (\d+), accepted (\d+) in ([0-9.]+) s", text)
if not m:
    sys.stderr.write(text); print(f"0 0 0 0 unparsed,exit={sys.argv[2]}"); sys.exit()
sent, answered, accepted, seconds = int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))
extra = [l.strip().replace(" ", "_") for l in text.splitlines() if l.startswith("  ") or l.startswith("stopped") or l.startswith("timed out")]
detail = ",".join([f"exit={sys.argv[2]}", f"unanswered={sent - answered}"] + extra)
print(f"{accepted / seconds:.0f} {seconds:.3f} {accepted} {sent - accepted} {detail}")
PY
}

# --- conditions ----------------------------------------------------------------------
bench_conditions
LOAD_BEFORE="$(bench_loadavg)"

log "N=$N connections=$CONNECTIONS streams=$STREAMS payload=${PAYLOAD_BYTES}B runs=$RUNS"
if [ "$WARMUP" -gt 0 ]; then
    log "warm-up (not counted): $WARMUP requests with each tool"
    for tool in h2load herald; do
        run_$tool warmup "$WARMUP" >"$WORK/line"
        log "  $tool warm-up: $(cut -d' ' -f1 "$WORK/line") /s"
    done
fi
RESULTS="$WORK/results.tsv"
: >"$RESULTS"
for run in $(seq "$RUNS"); do
    if [ $((run % 2)) = 1 ]; then order="h2load herald"; else order="herald h2load"; fi
    for tool in $order; do
        before="$(bench_stats_now)"
        emu_ticks_before="$(bench_emu_ticks)"
        log "run $run/$RUNS: $tool"
        run_$tool "$run" "$N" >"$WORK/line"
        line="$(cat "$WORK/line")"
        emu_cpu="$(bench_ticks_to_seconds "$emu_ticks_before" "$(bench_emu_ticks)")"
        # wall, user, sys of the client process (bash's time keyword)
        read -r c_wall c_user c_sys <"$WORK/$tool.$run.out.time" || { c_wall=0; c_user=0; c_sys=0; }
        client_cpu="$(awk -v u="$c_user" -v s="$c_sys" 'BEGIN{printf "%.2f", u+s}')"
        after="$(bench_stats_now)"
        delta="$(bench_stats_delta "$before" "$after")"
        printf '%s\t%s\t%s\t%s\t%s %s %s\n' "$run" "$tool" "$line" "$delta" "$client_cpu" "$emu_cpu" "$c_wall" >>"$RESULTS"
        log "  $tool: $(echo "$line" | awk '{print $1}') /s ($line) emulator: $delta; cpu s: client $client_cpu, emulator $emu_cpu"
    done
done
LOAD_AFTER="$(bench_loadavg)"

# Stop the emulator: SIGTERM makes it write --stats-out.
bench_stop_emulator
FINAL_STATS="$(cat "$WORK/stats.main.json" 2>/dev/null || echo '{}')"

# --- report --------------------------------------------------------------------------
"$PYTHON" - "$RESULTS" "$JSON_OUT" "$FINAL_STATS" <<PY
import json, statistics, sys
rows = []
for line in open(sys.argv[1]):
    run, tool, rest, emu, cpu = line.rstrip("\n").split("\t")
    client_cpu, emu_cpu, wall = (float(x) for x in cpu.split(" "))
    rate, seconds, ok, failed, detail = rest.split(" ", 4)
    e = emu.split(" ")
    rows.append(dict(run=int(run), tool=tool, rate=int(float(rate)), seconds=float(seconds), ok=int(ok),
                     not_ok=int(failed), detail=detail, client_cpu_s=client_cpu, emulator_cpu_s=emu_cpu,
                     process_wall_s=wall,
                     emulator=dict(accepted=e[0], rejected=e[1], streams=e[2], connections=e[3], reasons=e[4])))
conditions = dict(
    n=$N, warmup=$WARMUP, connections=$CONNECTIONS, streams=$STREAMS, payload_bytes=$PAYLOAD_BYTES, runs=$RUNS,
    nproc=$NPROC, cpu="""$CPU_MODEL""", swift="""$SWIFT_VERSION""", h2load="""$H2LOAD_VERSION""",
    commit="""$COMMIT$DIRTY""", loadavg_before="$LOAD_BEFORE", loadavg_after="$LOAD_AFTER",
    h2load_threads=1, herald_event_loops=1, pinned=bool($PIN),
)
med = {t: statistics.median([r["rate"] for r in rows if r["tool"] == t]) for t in ("h2load", "herald")}
# client CPU microseconds per 2xx answer (what each client costs on the shared cores)
cost = {t: statistics.median([r["client_cpu_s"] * 1e6 / r["ok"] for r in rows if r["tool"] == t and r["ok"]] or [0])
        for t in ("h2load", "herald")}
emu_cost = {t: statistics.median([r["emulator_cpu_s"] * 1e6 / r["ok"] for r in rows if r["tool"] == t and r["ok"]] or [0])
            for t in ("h2load", "herald")}
ratio = med["herald"] / med["h2load"] if med["h2load"] else float("nan")

print()
print("herald send vs h2load — one emulator (herald mock-apns), identical requests")
print(f"  N={conditions['n']} per run, {conditions['connections']} connections x {conditions['streams']} streams, "
      f"payload {conditions['payload_bytes']} B, {conditions['runs']} run(s) each, alternating, after {conditions['warmup']} warm-up requests each")
print(f"  {conditions['nproc']} cores ({conditions['cpu']}), " + ("emulator pinned to CPU 0, client to CPU 1;" if conditions["pinned"] else "shared by emulator + client (no pinning);") + f" load avg before {conditions['loadavg_before']}, after {conditions['loadavg_after']}")
print(f"  {conditions['swift']} | {conditions['h2load']} | commit {conditions['commit']}")
print()
print(f"  {'run':>3}  {'tool':<7} {'2xx/s':>9} {'seconds':>8} {'2xx':>8} {'not 2xx':>8} {'cpu s':>6} {'emu cpu':>7}  emulator(acc/rej/streams/conns)  detail")
for r in rows:
    e = r["emulator"]
    print(f"  {r['run']:>3}  {r['tool']:<7} {r['rate']:>9} {r['seconds']:>8.3f} {r['ok']:>8} {r['not_ok']:>8} "
          f"{r['client_cpu_s']:>6.2f} {r['emulator_cpu_s']:>7.2f}  "
          f"{e['accepted']+'/'+e['rejected']+'/'+e['streams']+'/'+e['connections']:<31}  {r['detail']}"
          + ("" if e["reasons"] in ("-", "") else f" reasons:{e['reasons']}"))
print()
print(f"  median  h2load {med['h2load']:>9.0f} 2xx/s")
print(f"  median  herald {med['herald']:>9.0f} accepted/s")
print(f"  ratio herald/h2load = {ratio:.2f}")
print(f"  client CPU per answer (median): h2load {cost['h2load']:.1f} us, herald {cost['herald']:.1f} us;"
      f" emulator CPU per answer: {emu_cost['h2load']:.1f} us (h2load runs), {emu_cost['herald']:.1f} us (herald runs)")
print()
print(f"  emulator totals (--stats-out): {sys.argv[3]}")
if sys.argv[2]:
    with open(sys.argv[2], "w") as f:
        json.dump(dict(conditions=conditions, runs=rows, median=med, ratio=ratio,
                       client_cpu_us_per_answer=cost, emulator_cpu_us_per_answer=emu_cost,
                       emulator_totals=json.loads(sys.argv[3] or "{}")), f, indent=2)
    print(f"  wrote {sys.argv[2]}")
PY
