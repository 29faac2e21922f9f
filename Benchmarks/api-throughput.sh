#!/usr/bin/env bash
# Batch enqueue throughput of `herald api` (release build): h2load POSTs batches of
# notifications (256-byte payloads, distinct tokens) over HTTP/1.1 keep-alive connections to
# one API process in front of a private redis-server, then checks that the queue's streams (bulk
# and urgent) hold every job. Prints notifications/s per run and the median; the streams are
# emptied between runs.
#   --requests N   POSTs per run (default 300)      --batch N    notifications per POST (default 1000)
#   --clients N    connections (default 8)          --runs N     runs (default 3)
#   --redis-connections N   the API's Redis connections (default 4)
set -euo pipefail
cd "$(dirname "$0")/.."

requests=300; batch=1000; clients=8; runs=3; redis_connections=4
while [ $# -gt 0 ]; do
	case "$1" in
		--requests) requests=$2; shift 2 ;;
		--batch) batch=$2; shift 2 ;;
		--clients) clients=$2; shift 2 ;;
		--runs) runs=$2; shift 2 ;;
		--redis-connections) redis_connections=$2; shift 2 ;;
		*) echo "unknown argument $1" >&2; exit 64 ;;
	esac
done

# HERALD: a release binary to use instead of building one (e.g. from another scratch path).
if [ -z "${HERALD:-}" ]; then
	swift build -c release --static-swift-stdlib --product herald >/dev/null
	HERALD=.build/release/herald
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
work=$(mktemp -d)
redis_pid=""; api_pid=""
cleanup() {
	[ -n "$api_pid" ] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
	[ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save '' --appendonly no --daemonize no --logfile "$work/redis.log" &
redis_pid=$!
token=$(openssl rand -hex 32)
echo "$token" > "$work/tokens"
api_port=$(free_port)
"$HERALD" api --redis "redis://127.0.0.1:$redis_port" --tokens-file "$work/tokens" --listen "127.0.0.1:$api_port" \
	--redis-connections "$redis_connections" --max-batch "$batch" --log-level warning 2> "$work/api.log" &
api_pid=$!
ready() { python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$api_port/readyz', timeout=2)" 2>/dev/null; }
for _ in $(seq 300); do ready && break; sleep 0.1; done
ready || { echo "herald api did not start:"; cat "$work/api.log"; exit 1; }

python3 - "$batch" > "$work/body.json" <<'PY'
import json, sys
n = int(sys.argv[1])
alert = "x" * 229  # {"aps":{"alert":"…"}} is 256 bytes
jobs = [{"token": "%064x" % (0xfc13adff785122b4ad2880 + i), "payload": {"aps": {"alert": alert}}} for i in range(n)]
print(json.dumps({"notifications": jobs}, separators=(",", ":")))
PY

echo "api-throughput: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "api-throughput: $requests POSTs x $batch notifications, $clients connections, body $(stat -c %s "$work/body.json") bytes, API redis connections $redis_connections"
# CPU seconds (user + system) a process has used, from /proc.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
rates=()
for run in $(seq "$runs"); do
	redis-cli -p "$redis_port" DEL 'herald:{default}:jobs' 'herald:{default}:jobs:urgent' >/dev/null
	api_cpu0=$(cpu "$api_pid"); redis_cpu0=$(cpu "$redis_pid")
	out=$(h2load --h1 -n "$requests" -c "$clients" -m 1 -d "$work/body.json" \
		-H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
		"http://127.0.0.1:$api_port/v1/notifications" 2>&1)
	status=$(echo "$out" | grep -E '^status codes:' || true)
	# h2load prints "finished in 1.62s" or, under a second, "finished in 952.64ms".
	seconds=$(echo "$out" | sed -n 's/^finished in \([0-9.]*\)\(m\{0,1\}\)s,.*/\1 \2/p' | awk '{print ($2 == "m") ? $1 / 1000 : $1}')
	api_cpu1=$(cpu "$api_pid"); redis_cpu1=$(cpu "$redis_pid")
	# Alerts at the default priority go to the urgent lane (docs/api.md): both streams count.
	length=$(( $(redis-cli -p "$redis_port" XLEN 'herald:{default}:jobs') + $(redis-cli -p "$redis_port" XLEN 'herald:{default}:jobs:urgent') ))
	expected=$((requests * batch))
	rate=$(python3 -c "print(round($length / $seconds))")
	costs=$(python3 -c "print('API %.2f µs, Redis %.2f µs CPU per notification' % (($api_cpu1 - $api_cpu0) * 1e6 / $length, ($redis_cpu1 - $redis_cpu0) * 1e6 / $length))")
	echo "run $run: $length notifications in ${seconds}s = $rate/s; $costs ($status)"
	if [ "$length" != "$expected" ]; then echo "run $run: the streams hold $length, expected $expected"; exit 1; fi
	rates+=("$rate")
done
median=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "api-throughput: median $median notifications/s over $runs runs; herald api peak RSS $(awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' "/proc/$api_pid/status"), now $(awk '/VmRSS/ {printf "%.1f MiB", $2 / 1024}' "/proc/$api_pid/status")"
