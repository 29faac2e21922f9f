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

log() { echo "[bench] $*" >&2; }

# --- tools ---------------------------------------------------------------------------
command -v h2load >/dev/null || { echo "h2load not found: run 'make deps' (Debian nghttp2-client)" >&2; exit 69; }
PYTHON=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import cryptography' 2>/dev/null; then PYTHON="$p"; break; fi
done
[ -n "$PYTHON" ] || { echo "no python3 with the cryptography module: run 'make deps' (python3-cryptography)" >&2; exit 69; }

# --- build -----------------------------------------------------------------------------
if [ -n "${HERALD_BIN:-}" ]; then
    BIN="$HERALD_BIN"
elif [ "$BUILD" = 1 ]; then
    log "swift build -c release --product herald (incremental)"
    swift build -c release --product herald >&2
    BIN="$(swift build -c release --show-bin-path)/herald"
else
    BIN="$ROOT/.build/release/herald"
fi
[ -x "$BIN" ] || { echo "no herald binary at $BIN" >&2; exit 69; }

EMU_PIN=()
CLIENT_PIN=()
if [ "$PIN" = 1 ]; then
    command -v taskset >/dev/null || { echo "--pin needs taskset (util-linux)" >&2; exit 69; }
    [ "$(nproc)" -ge 2 ] || { echo "--pin needs at least 2 CPUs" >&2; exit 64; }
    EMU_PIN=(taskset -c 0)
    CLIENT_PIN=(taskset -c 1)
fi

# --- emulator ------------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/send-vs-h2load.XXXXXX")"
EMU_PID=""
cleanup() {
    local rc=$?
    if [ -n "$EMU_PID" ] && kill -0 "$EMU_PID" 2>/dev/null; then
        kill -TERM "$EMU_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$EMU_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$EMU_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "starting the emulator: herald mock-apns --port 0 --max-streams $STREAMS"
"${EMU_PIN[@]}" "$BIN" mock-apns --port 0 --max-streams "$STREAMS" \
    --cert-out "$WORK/ca.pem" --write-key "$WORK/key.p8" --stats-out "$WORK/stats.json" \
    --log-level error >"$WORK/emulator.out" 2>"$WORK/emulator.err" </dev/null &
EMU_PID=$!
PORT=""
for _ in $(seq 300); do
    PORT="$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$WORK/emulator.out" | head -1)"
    [ -n "$PORT" ] && break
    kill -0 "$EMU_PID" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$PORT" ]; then
    echo "the emulator did not start:" >&2; cat "$WORK/emulator.out" "$WORK/emulator.err" >&2; exit 70
fi
log "emulator pid $EMU_PID on 127.0.0.1:$PORT"

# --- identical requests --------------------------------------------------------------
TEAM_ID=TEAM000001
KEY_ID=KEY0000001
BUNDLE_ID=com.example.app
DEVICE_TOKEN=5d3f1c2b8a7e6f4091b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a7b8
PRIORITY=10
"$PYTHON" "$TOOLS/make-payload.py" "$PAYLOAD_BYTES" "$WORK/payload.json"
PAYLOAD="$(cat "$WORK/payload.json")"

# Emulator counters, for per-run deltas (GET /_herald/stats over h2; needs curl with HTTP/2).
CURL_H2=0
if curl --version 2>/dev/null | grep -qi 'HTTP2'; then CURL_H2=1; fi
stats_now() {
    if [ "$CURL_H2" = 1 ]; then
        curl -sk --http2 --max-time 10 "https://127.0.0.1:$PORT/_herald/stats" || echo '{}'
    else
        echo '{}'
    fi
}
# delta BEFORE AFTER -> "accepted rejected_total streams connections rejected-reasons"
# The GET that took AFTER is itself counted in it (one connection, one stream): left out.
stats_delta() {
    "$PYTHON" - "$1" "$2" <<'PY'
import json, sys
try:
    a, b = json.loads(sys.argv[1] or "{}"), json.loads(sys.argv[2] or "{}")
except ValueError:
    a, b = {}, {}
if not b:
    print("- - - - -"); sys.exit()
d = lambda k: b.get(k, 0) - a.get(k, 0)
ra, rb = a.get("rejected", {}), b.get("rejected", {})
reasons = {k: rb[k] - ra.get(k, 0) for k in rb if rb[k] - ra.get(k, 0)}
print(d("accepted"), d("rejected_total"), d("streams") - 1, d("connections") - 1,
      ",".join(f"{k}={v}" for k, v in sorted(reasons.items())) or "-")
PY
}

# Waits for the client subshell $1; if the emulator dies meanwhile, stops the client and
# the whole benchmark (numbers against a dead emulator mean nothing).
watch_client() {
    local sub="$1" rc=0
    while kill -0 "$sub" 2>/dev/null; do
        if ! kill -0 "$EMU_PID" 2>/dev/null; then
            pkill -TERM -P "$sub" 2>/dev/null || true
            wait "$sub" 2>/dev/null || true
            emulator_died
        fi
        sleep 0.2
    done
    wait "$sub" || rc=$?
    kill -0 "$EMU_PID" 2>/dev/null || emulator_died
    return $rc
}
emulator_died() {
    local rc=0
    wait "$EMU_PID" 2>/dev/null || rc=$?
    echo "[bench] FAILED: the emulator (pid $EMU_PID) exited during the run (exit status $rc)." >&2
    if grep -q '^{' "$WORK/emulator.out" 2>/dev/null; then
        echo "[bench] It printed its stats, so it stopped on SIGTERM/SIGINT from outside this script." >&2
    fi
    tail -n 20 "$WORK/emulator.out" "$WORK/emulator.err" >&2 || true
    EMU_PID=""
    exit 75
}

# --- one run of each tool ------------------------------------------------------------
# Each prints one line: "rate seconds ok failed detail"
run_h2load() {
    local jwt out
    jwt="$("$PYTHON" "$TOOLS/mint-jwt.py" --key "$WORK/key.p8" --team-id "$TEAM_ID" --key-id "$KEY_ID")"
    out="$WORK/h2load.$1.out"
    local TIMEFORMAT='%R %U %S'
    { time "${CLIENT_PIN[@]}" h2load -n "$2" -c "$CONNECTIONS" -m "$STREAMS" -d "$WORK/payload.json" \
        -H "authorization: bearer $jwt" \
        -H "apns-topic: $BUNDLE_ID" \
        -H "apns-push-type: alert" \
        -H "apns-priority: $PRIORITY" \
        "https://127.0.0.1:$PORT/3/device/$DEVICE_TOKEN" >"$out" 2>&1 </dev/null ; } 2>"$out.time" &
    watch_client $! || true
    "$PYTHON" - "$out" "$2" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
n = int(sys.argv[2])
m = re.search(r"finished in ([0-9.]+)(us|ms|s),", text)
codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
reqs = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", text)
if not (m and codes and reqs):
    sys.stderr.write(text); print("0 0 0 0 unparsed"); sys.exit()
seconds = float(m.group(1)) / {"us": 1e6, "ms": 1e3, "s": 1}[m.group(2)]
ok = int(codes.group(1))
failed = n - ok  # h2load's failed already includes errored and timeout
detail = f"failed={reqs.group(5)},errored={reqs.group(6)},timeout={reqs.group(7)},4xx={codes.group(3)},5xx={codes.group(4)}"
print(f"{ok / seconds:.0f} {seconds:.3f} {ok} {failed} {detail}")
PY
}

run_herald() {
    local out rc=0 TIMEFORMAT='%R %U %S'
    out="$WORK/herald.$1.out"
    { time "${CLIENT_PIN[@]}" "$BIN" send --apns-host 127.0.0.1 --apns-port "$PORT" --ca-file "$WORK/ca.pem" \
        --key-file "$WORK/key.p8" --team-id "$TEAM_ID" --key-id "$KEY_ID" \
        --bundle-id "$BUNDLE_ID" --token "$DEVICE_TOKEN" --priority "$PRIORITY" \
        --payload "$PAYLOAD" --count "$2" --quiet \
        --connections "$CONNECTIONS" --max-streams "$STREAMS" --timeout $((60 + $2 / 500)) \
        >"$out" 2>&1 </dev/null ; } 2>"$out.time" &
    watch_client $! || rc=$?
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

# CPU time (user+sys, in clock ticks) the emulator has used so far.
CLK_TCK="$(getconf CLK_TCK)"
emu_ticks() { awk '{print $14 + $15}' "/proc/$EMU_PID/stat" 2>/dev/null || echo 0; }

# --- conditions ----------------------------------------------------------------------
CPU_MODEL="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
NPROC="$(nproc)"
SWIFT_VERSION="$(swift --version 2>&1 | head -1 || echo unknown)"
H2LOAD_VERSION="$(h2load --version 2>&1 | head -1)"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
DIRTY="$(git -C "$ROOT" status --porcelain -- Sources Package.swift 2>/dev/null | grep -q . && echo ' (+ uncommitted changes in Sources/Package.swift)' || true)"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"

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
        before="$(stats_now)"
        emu_ticks_before="$(emu_ticks)"
        log "run $run/$RUNS: $tool"
        run_$tool "$run" "$N" >"$WORK/line"
        line="$(cat "$WORK/line")"
        emu_cpu="$(awk -v a="$emu_ticks_before" -v b="$(emu_ticks)" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/hz}')"
        # wall, user, sys of the client process (bash's time keyword)
        read -r c_wall c_user c_sys <"$WORK/$tool.$run.out.time" || { c_wall=0; c_user=0; c_sys=0; }
        client_cpu="$(awk -v u="$c_user" -v s="$c_sys" 'BEGIN{printf "%.2f", u+s}')"
        after="$(stats_now)"
        delta="$(stats_delta "$before" "$after")"
        printf '%s\t%s\t%s\t%s\t%s %s %s\n' "$run" "$tool" "$line" "$delta" "$client_cpu" "$emu_cpu" "$c_wall" >>"$RESULTS"
        log "  $tool: $(echo "$line" | awk '{print $1}') /s ($line) emulator: $delta; cpu s: client $client_cpu, emulator $emu_cpu"
    done
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

# Stop the emulator: SIGTERM makes it write --stats-out.
kill -TERM "$EMU_PID" 2>/dev/null || true
wait "$EMU_PID" 2>/dev/null || true
EMU_PID=""
FINAL_STATS="$(cat "$WORK/stats.json" 2>/dev/null || echo '{}')"

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
