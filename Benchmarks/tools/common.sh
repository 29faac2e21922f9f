# Shared bash for the benchmark scripts (send-vs-h2load.sh, compare.sh). Source it; it
# defines functions and constants only, and uses these globals:
#   ROOT TOOLS              repository root, Benchmarks/tools
#   WORK                    the script's temporary directory (made by bench_make_workdir)
#   PYTHON                  python3 with `cryptography` (bench_find_python)
#   BIN                     the herald binary (bench_resolve_herald)
#   EMU_PID PORT STATS_PORT the running emulator (bench_start_emulator / bench_stop_emulator)
#   EMU_PIN CLIENT_PIN      optional taskset prefixes (arrays; empty = no pinning)
#   CONNECTIONS STREAMS     what every client uses
# Identical requests for every client: the constants below and $WORK/payload.json.

TEAM_ID=TEAM000001
KEY_ID=KEY0000001
BUNDLE_ID=com.example.app
DEVICE_TOKEN=5d3f1c2b8a7e6f4091b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a7b8
PRIORITY=10

EMU_PID=""
PORT=""
STATS_PORT=""
[ "${EMU_PIN+set}" = set ] || EMU_PIN=()
[ "${CLIENT_PIN+set}" = set ] || CLIENT_PIN=()

log() { echo "[bench] $*" >&2; }

# --- tools -----------------------------------------------------------------------------
bench_require_h2load() {
    command -v h2load >/dev/null || { echo "h2load not found: run 'make deps' (Debian nghttp2-client)" >&2; exit 69; }
}

bench_find_python() {
    PYTHON=""
    local p
    for p in python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import cryptography' 2>/dev/null; then PYTHON="$p"; break; fi
    done
    [ -n "$PYTHON" ] || { echo "no python3 with the cryptography module: run 'make deps' (python3-cryptography)" >&2; exit 69; }
}

# bench_resolve_herald BUILD [PATH]: sets BIN. PATH (or $HERALD_BIN) wins; BUILD=1 runs an
# incremental `swift build -c release --static-swift-stdlib --product herald` (the binary `make
# dist` ships, static Swift runtime); otherwise .build/release/herald.
bench_resolve_herald() {
    local build="$1" path="${2:-${HERALD_BIN:-}}"
    if [ -n "$path" ]; then
        BIN="$path"
    elif [ "$build" = 1 ]; then
        log "swift build -c release --static-swift-stdlib --product herald (incremental)"
        (cd "$ROOT" && swift build -c release --static-swift-stdlib --product herald >&2)
        BIN="$(cd "$ROOT" && swift build -c release --static-swift-stdlib --show-bin-path)/herald"
    else
        BIN="$ROOT/.build/release/herald"
    fi
    [ -x "$BIN" ] || { echo "no herald binary at $BIN" >&2; exit 69; }
    BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
}

# --- working directory and cleanup ----------------------------------------------------------
# bench_make_workdir NAME: WORK=a fresh temporary directory; on exit the emulator is stopped,
# BENCH_CLEANUP_HOOK (a function name, optional) runs, and WORK is removed.
bench_make_workdir() {
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
bench_cleanup() {
    local rc=$?
    [ -z "${BENCH_CLEANUP_HOOK:-}" ] || "$BENCH_CLEANUP_HOOK" || true
    bench_stop_emulator
    [ -n "${KEEP_WORK:-}" ] && [ "$KEEP_WORK" != 0 ] && log "kept $WORK" || rm -rf "$WORK"
    exit $rc
}

# --- the emulator ------------------------------------------------------------------------
# bench_start_emulator TAG [extra mock-apns arguments…]: one `herald mock-apns` on a free
# port that writes its key to $WORK/key.p8 and its certificate to $WORK/ca.pem (the same files
# for every emulator of a run, so clients started earlier need nothing new), and its final
# counts to $WORK/stats.TAG.json. Sets EMU_PID and PORT (and STATS_PORT with --stats-port 0).
bench_start_emulator() {
    local tag="$1"; shift
    "${EMU_PIN[@]}" "$BIN" mock-apns --port 0 --max-streams "$STREAMS" \
        --cert-out "$WORK/ca.pem" --write-key "$WORK/key.p8" --stats-out "$WORK/stats.$tag.json" \
        --expect-notifications "${EXPECT_IDS:-$(( ${N:-100000} * 8 ))}" \
        --log-level error "$@" >"$WORK/emulator.$tag.out" 2>"$WORK/emulator.$tag.err" </dev/null &
    EMU_PID=$!
    PORT=""
    STATS_PORT=""
    local want_stats=0 a
    for a in "$@"; do [ "$a" = --stats-port ] && want_stats=1; done
    for _ in $(seq 300); do
        PORT="$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$WORK/emulator.$tag.out" | head -1)"
        STATS_PORT="$(sed -n 's/^stats on .*:\([0-9][0-9]*\)$/\1/p' "$WORK/emulator.$tag.out" | head -1)"
        [ -n "$PORT" ] && { [ "$want_stats" = 0 ] || [ -n "$STATS_PORT" ]; } && break
        kill -0 "$EMU_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$PORT" ] || { [ "$want_stats" = 1 ] && [ -z "$STATS_PORT" ]; }; then
        echo "the emulator did not start:" >&2; cat "$WORK/emulator.$tag.out" "$WORK/emulator.$tag.err" >&2; exit 70
    fi
    EMU_TAG="$tag"
    log "emulator pid $EMU_PID on 127.0.0.1:$PORT${STATS_PORT:+ (stats on 127.0.0.1:$STATS_PORT)} ($*)"
}

# Stops the emulator with SIGTERM (it writes --stats-out), SIGKILL after 5 s.
bench_stop_emulator() {
    if [ -n "$EMU_PID" ] && kill -0 "$EMU_PID" 2>/dev/null; then
        kill -TERM "$EMU_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$EMU_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$EMU_PID" 2>/dev/null || true
        wait "$EMU_PID" 2>/dev/null || true
    fi
    EMU_PID=""
}

# CPU time (user+sys, clock ticks) the emulator has used so far.
CLK_TCK="$(getconf CLK_TCK)"
bench_emu_ticks() { awk '{print $14 + $15}' "/proc/$EMU_PID/stat" 2>/dev/null || echo 0; }
# bench_ticks_to_seconds BEFORE AFTER
bench_ticks_to_seconds() { awk -v a="$1" -v b="$2" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/hz}'; }

# Emulator counters, for per-run deltas (GET /_herald/stats over h2; needs curl with HTTP/2).
BENCH_CURL_H2=0
if curl --version 2>/dev/null | grep -qi 'HTTP2'; then BENCH_CURL_H2=1; fi
# bench_forget_ids: before each measured run, the emulator forgets the apns-ids it accepted
# (counts stay), so a run's per-id bookkeeping is a table of its own ids, whatever ran before
# it and in whatever order (see MockAPNsServer.forgetAcceptedIDs). Needs --stats-port.
bench_forget_ids() {
    [ -n "${STATS_PORT:-}" ] || return 0
    curl -s --max-time 10 "http://127.0.0.1:$STATS_PORT/_herald/forget-ids" >/dev/null || log "could not reach the emulator's forget-ids"
}

bench_stats_now() {
    if [ "$BENCH_CURL_H2" = 1 ]; then
        curl -sk --http2 --max-time 10 "https://127.0.0.1:$PORT/_herald/stats" || echo '{}'
    else
        echo '{}'
    fi
}
# bench_stats_delta BEFORE AFTER -> "accepted rejected_total streams connections rejected-reasons"
# The GET that took AFTER is itself counted in it (one connection, one stream): left out.
bench_stats_delta() {
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

# bench_watch_client PID: waits for the client (sub)process; if the emulator dies meanwhile,
# stops the client and the whole benchmark (numbers against a dead emulator mean nothing).
bench_watch_client() {
    local sub="$1" rc=0
    while kill -0 "$sub" 2>/dev/null; do
        if ! kill -0 "$EMU_PID" 2>/dev/null; then
            pkill -TERM -P "$sub" 2>/dev/null || true
            kill -TERM "$sub" 2>/dev/null || true
            wait "$sub" 2>/dev/null || true
            bench_emulator_died
        fi
        sleep 0.2
    done
    wait "$sub" || rc=$?
    kill -0 "$EMU_PID" 2>/dev/null || bench_emulator_died
    return $rc
}
bench_emulator_died() {
    local rc=0
    wait "$EMU_PID" 2>/dev/null || rc=$?
    echo "[bench] FAILED: the emulator (pid $EMU_PID) exited during the run (exit status $rc)." >&2
    if grep -q '^{' "$WORK/emulator.$EMU_TAG.out" 2>/dev/null; then
        echo "[bench] It printed its stats, so it stopped on SIGTERM/SIGINT from outside this script." >&2
    fi
    tail -n 20 "$WORK/emulator.$EMU_TAG.out" "$WORK/emulator.$EMU_TAG.err" >&2 || true
    EMU_PID=""
    exit 75
}

# --- h2load ----------------------------------------------------------------------------------
# bench_run_h2load TAG N: h2load -n N -c CONNECTIONS -m STREAMS with the identical request
# against the running emulator (one thread, h2load's default). Prints one line
# "rate seconds ok not_ok detail"; bash `time` of the process goes to $WORK/h2load.TAG.out.time
# ("wall user sys").
bench_run_h2load() {
    local jwt out
    jwt="$("$PYTHON" "$TOOLS/mint-jwt.py" --key "$WORK/key.p8" --team-id "$TEAM_ID" --key-id "$KEY_ID")"
    out="$WORK/h2load.$1.out"
    # One path, or H2LOAD_TOKENS distinct ones (-i: each client cycles through the file).
    local target=("https://127.0.0.1:$PORT/3/device/$DEVICE_TOKEN")
    if [ "${H2LOAD_TOKENS:-1}" -gt 1 ]; then
        "$PYTHON" "$TOOLS/make-uris.py" "$H2LOAD_TOKENS" "https://127.0.0.1:$PORT" "$WORK/uris.txt"
        target=(-i "$WORK/uris.txt")
    fi
    local TIMEFORMAT='%R %U %S'
    { time "${CLIENT_PIN[@]}" h2load -n "$2" -c "$CONNECTIONS" -m "$STREAMS" -d "$WORK/payload.json" \
        -H "authorization: bearer $jwt" \
        -H "apns-topic: $BUNDLE_ID" \
        -H "apns-push-type: alert" \
        -H "apns-priority: $PRIORITY" \
        "${target[@]}" >"$out" 2>&1 </dev/null ; } 2>"$out.time" &
    bench_watch_client $! || true
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

# bench_client_cpu FILE.time -> user+sys seconds of the bash `time` line in FILE
bench_client_cpu() {
    local w u s
    read -r w u s <"$1" 2>/dev/null || { echo 0.00; return; }
    awk -v u="$u" -v s="$s" 'BEGIN{printf "%.2f", u+s}'
}

# --- conditions ----------------------------------------------------------------------------
# Sets CPU_MODEL NPROC SWIFT_VERSION H2LOAD_VERSION COMMIT (with a note when Sources/ or
# Package.swift have uncommitted changes in ROOT; a --herald binary may come from elsewhere).
bench_conditions() {
    CPU_MODEL="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    NPROC="$(nproc)"
    SWIFT_VERSION="$(swift --version 2>&1 | head -1 || echo unknown)"
    H2LOAD_VERSION="$(h2load --version 2>&1 | head -1)"
    COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    DIRTY="$(git -C "$ROOT" status --porcelain -- Sources Package.swift 2>/dev/null | grep -q . && echo ' (+ uncommitted changes in Sources/Package.swift)' || true)"
}
bench_loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
