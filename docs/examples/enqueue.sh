#!/usr/bin/env bash
# Herald producer with nothing but redis-cli: one job, one fan-out job, and a
# pipelined bulk enqueue. See docs/job-format.md for every field.
#
#   REDIS_URL=redis://127.0.0.1:6379 QUEUE=default COUNT=1000 ./enqueue.sh
set -euo pipefail

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
QUEUE=${QUEUE:-default}
COUNT=${COUNT:-1000}
# Quoted: the braces are part of the key (a Redis Cluster hash tag).
JOBS="herald:{${QUEUE}}:jobs"

TOKEN_A=7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809102
TOKEN_B=7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809103
TOKEN_C=7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809104

# 1. One notification to one device. XADD prints the entry id (e.g. 1718000000000-0).
redis-cli -u "$REDIS_URL" XADD "$JOBS" '*' \
  token "$TOKEN_A" \
  payload '{"aps":{"alert":{"title":"Order shipped","body":"Your order #1234 is on its way."},"sound":"default"}}' \
  collapse_id order-1234

# 2. One payload to several devices (fan-out, up to 10,000 tokens, comma-separated).
redis-cli -u "$REDIS_URL" XADD "$JOBS" '*' \
  tokens "$TOKEN_A,$TOKEN_B,$TOKEN_C" \
  payload '{"aps":{"alert":"Flash sale: 20% off today only"}}' \
  push_type alert priority 5 expiration "$(( $(date +%s) + 3600 ))"

# 3. Bulk: COUNT jobs in one round trip. redis-cli --pipe reads the Redis protocol
#    (RESP), which carries any bytes (JSON quotes, spaces, UTF-8) without escaping.
resp() {  # resp ARG... -> one RESP command
  printf '*%d\r\n' "$#"
  local arg
  for arg in "$@"; do
    printf '$%d\r\n%s\r\n' "$(printf '%s' "$arg" | wc -c)" "$arg"
  done
}
for i in $(seq 1 "$COUNT"); do
  token=$(printf '7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e%08x' "$i")
  resp XADD "$JOBS" '*' token "$token" payload "{\"aps\":{\"alert\":\"Hello #$i\"},\"n\":$i}"
done | redis-cli -u "$REDIS_URL" --pipe
