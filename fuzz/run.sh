#!/usr/bin/env bash
# Runs every fuzzer for a bounded time from the seed corpus in fuzz/corpus/<fuzzer>/,
# which is only read: inputs found on the way go to a temporary directory. Fails on the
# first crash, sanitizer report, hang (-timeout) or memory blow-up (-rss_limit_mb) and
# keeps the input that caused it under BUILD_DIR/artifacts/.
# Usage: fuzz/run.sh BUILD_DIR SECONDS_PER_FUZZER
set -euo pipefail
build_dir=$1
seconds=$2
root="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d "${TMPDIR:-/tmp}/raio-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$build_dir/artifacts"
status=0
for fuzzer in frame message value jobs_http; do
  mkdir -p "$work/$fuzzer"
  log="$build_dir/artifacts/$fuzzer.log"
  start=$(date +%s)
  if "$build_dir/${fuzzer}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
       -print_final_stats=1 -artifact_prefix="$build_dir/artifacts/$fuzzer-" \
       "$work/$fuzzer" "$root/corpus/$fuzzer" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: ${fuzzer}_fuzzer: $runs inputs in $(( $(date +%s) - start )) s, no failure"
  else
    echo "fuzz: ${fuzzer}_fuzzer FAILED; the input is in $build_dir/artifacts/ (log $log):"
    tail -n 60 "$log"
    status=1
  fi
done
exit $status
