#!/usr/bin/env bash
# Builds Herald's libFuzzer targets (this folder's package) with the fuzzer and AddressSanitizer,
# then runs each for FUZZ_SECONDS on a copy of its seed corpus (Corpus/<name>/), with its
# dictionary when it has one (Dictionaries/<name>.dict). Prints the
# executions per target; exits non-zero if any target crashed, printing the crashing input's
# path and the end of its log (the stack).
#   FUZZ_SECONDS   seconds per target (default 60)
#   FUZZ_TARGETS   space-separated subset, e.g. "FuzzJobDecoder FuzzRedisURL" (default: all)
#   FUZZ_OUT       where copies of the corpora, logs and crashing inputs go (default .build/fuzz-run)
#   SWIFT          the swift command (default swift)
set -euo pipefail
cd "$(dirname "$0")"

seconds=${FUZZ_SECONDS:-60}
swift=${SWIFT:-swift}
out=${FUZZ_OUT:-.build/fuzz-run}

# Target executable and its corpus folder.
all_targets=(
  "FuzzJobDecoder job-decoder"
  "FuzzJSONPayload json-payload"
  "FuzzAPNsErrorBody apns-error-body"
  "FuzzRedisReply redis-reply"
  "FuzzRedisURL redis-url"
  "FuzzProviderToken provider-token"
  "FuzzMetricsRequest metrics-request"
  "FuzzConfigFile config-file"
)

# swift-frontend keeps only the last of several -sanitize= flags, so SwiftPM's separate
# --sanitize=fuzzer --sanitize=address compile Swift with AddressSanitizer but no coverage;
# the combined -Xswiftc flag restores both (SwiftPM's own flags still link both runtimes and
# instrument the C targets). -enable-testing: FuzzRedisReply reaches Transport's internal reply tape.
echo "== fuzz: building (release, fuzzer + address)"
start=$(date +%s)
$swift build -c release -Xswiftc -enable-testing --sanitize=fuzzer --sanitize=address \
  -Xswiftc -sanitize=fuzzer,address 2>&1 | grep -vE "prohibited flag|Cannot export local symbol" || {
  echo "fuzz: build failed" >&2; exit 1; }
bin=$($swift build -c release -Xswiftc -enable-testing --sanitize=fuzzer --sanitize=address \
  -Xswiftc -sanitize=fuzzer,address --show-bin-path)
echo "== fuzz: built in $(( $(date +%s) - start )) s; ${seconds} s per target"

mkdir -p "$out"
failed=()
summary=()
for entry in "${all_targets[@]}"; do
  read -r target corpus <<<"$entry"
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $target "* ]]; then continue; fi
  work="$out/$target"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp Corpus/"$corpus"/* "$work/corpus/"
  dictionary=()
  [ -f "Dictionaries/$corpus.dict" ] && dictionary=(-dict="Dictionaries/$corpus.dict")
  status=0
  # Leak checks are off: the Swift runtime's metadata caches and the module's lazily built
  # globals live for the process and would be reported after the first input that builds them.
  # Swift's own backtracer is off: under AddressSanitizer it trips over its memory reads and
  # hangs; libFuzzer prints the stack of a trap itself.
  SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$bin/$target" "$work/corpus" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1536 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "${dictionary[@]}" >"$work/log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  crash=$(find "$work/artifacts" -type f | head -1)
  if [ "$status" -ne 0 ] || [ -n "$crash" ]; then
    failed+=("$target")
    summary+=("$(printf '%-20s %12s executions  FAILED (exit %s) %s' "$target" "${execs:-?}" "$status" "$crash")")
    echo "== fuzz: $target failed; input: ${crash:-none}; log: $work/log"
    grep -E "ERROR|Fatal error|SUMMARY|^ +#[0-9]+ " "$work/log" | head -25 || true
  else
    summary+=("$(printf '%-20s %12s executions  ok, corpus %s inputs' "$target" "$execs" "$(ls "$work/corpus" | wc -l)")")
  fi
done

echo "== fuzz: results (${seconds} s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]}" >&2
  exit 1
fi
