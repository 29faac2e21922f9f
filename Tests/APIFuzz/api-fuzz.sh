#!/usr/bin/env bash
# `make api-fuzz`: schemathesis (PyPI) against docs/api.openapi.yaml and a real `herald api`
# on a private redis-server. Every response must be documented (status, headers, JSON schema),
# no request may get a 5xx, and the server must survive. Fails on any finding.
#   API_FUZZ_EXAMPLES  examples per operation (default 100)
#   HERALD             the herald binary (default .build/debug/herald, built first)
#   SCHEMATHESIS       version pinned in the virtualenv (default below)
set -euo pipefail
cd "$(dirname "$0")/../.."

EXAMPLES="${API_FUZZ_EXAMPLES:-100}"
VERSION="${SCHEMATHESIS:-4.32.5}"
HERALD="${HERALD:-.build/debug/herald}"
VENV=".build/api-fuzz-venv"

if [ ! -x "$VENV/bin/st" ] || ! "$VENV/bin/st" --version 2>/dev/null | grep -q "$VERSION"; then
	echo "api-fuzz: installing schemathesis $VERSION into $VENV"
	python3 -m venv "$VENV"
	"$VENV/bin/pip" install -q "schemathesis==$VERSION"
fi
[ -x "$HERALD" ] || swift build --product herald

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
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save '' --appendonly no --daemonize no \
	--logfile "$work/redis.log" &
redis_pid=$!
token=$(openssl rand -hex 32)
echo "$token" > "$work/tokens"
api_port=$(free_port)
"$HERALD" api --redis "redis://127.0.0.1:$redis_port" --tokens-file "$work/tokens" --listen "127.0.0.1:$api_port" \
	--log-level warning 2> "$work/api.log" &
api_pid=$!
ready() { python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$api_port/readyz', timeout=2)" 2>/dev/null; }
for _ in $(seq 300); do ready && break; sleep 0.1; done
ready || { echo "api-fuzz: herald api did not become ready; its log:"; cat "$work/api.log"; exit 1; }

# Something to list: dead letters and feedback entries shaped as the worker writes them.
for i in 1 2 3; do
	redis-cli -p "$redis_port" XADD 'herald:{default}:dead' '*' token "aabbccdd$(printf '%056d' $i)" \
		payload '{"aps":{"alert":"x"}}' reason bad_priority message m status 400 attempts 1 failed_at 1700000000000 >/dev/null
	redis-cli -p "$redis_port" XADD 'herald:{default}:feedback' '*' token "aabbccdd$(printf '%056d' $i)" \
		topic com.example reason Unregistered timestamp 1700000000000 job "1-$i" >/dev/null
done

# Every check but positive_data_acceptance: a job that fits the schema may still be one the worker
# would dead-letter (a token that is not hex, a payload over 4 KB, an id that is no UUID), and
# the API refuses those with 422 by design; the schema cannot carry every rule of job-format.md.
# From the scratch directory: schemathesis keeps its state (.schemathesis/) where it runs.
status=0
root=$(pwd)
(cd "$work" && "$root/$VENV/bin/st" run "$root/docs/api.openapi.yaml" --url "http://127.0.0.1:$api_port" \
	-H "Authorization: Bearer $token" --checks all --exclude-checks positive_data_acceptance --max-examples "$EXAMPLES" \
	--suppress-health-check all --no-color) || status=$?
if ! kill -0 "$api_pid" 2>/dev/null; then
	echo "api-fuzz: herald api died; its log:"; cat "$work/api.log"; exit 1
fi
if [ "$status" != 0 ]; then echo "api-fuzz: schemathesis found problems (above); the API's log:"; tail -50 "$work/api.log"; fi
exit "$status"
