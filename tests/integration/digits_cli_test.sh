#!/usr/bin/env bash
# Command-line behaviour of the digits example (examples/digits): bad data files give a
# clear error and a non-zero exit; a small end-to-end run in both modes succeeds.
# Usage: digits_cli_test.sh PATH_TO_DIGITS_BINARY
set -u
bin="$1"
# Each run has a deadline (120 s times the test time scale): a run that hangs fails here
# with exit 124 instead of holding the test until ctest kills it.
limit_s=$(awk -v s="${RAIO_TEST_TIME_SCALE:-${RAIO_BUILD_TIME_SCALE:-1}}" \
  'BEGIN { s += 0; if (s < 1) s = 1; printf "%d", 120 * s }')
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

# expect_error NAME EXPECTED_MESSAGE ARGS...: the run must exit non-zero and print the message.
expect_error() {
  local name="$1" message="$2"
  shift 2
  local rc=0
  timeout -k 10 "$limit_s" "$bin" "$@" >"$dir/out" 2>"$dir/err" || rc=$?
  if [ "$rc" -eq 0 ] || ! grep -qF -- "$message" "$dir/err"; then
    echo "FAIL $name: exit $rc, stderr:"; cat "$dir/err"; failures=$((failures + 1))
  else
    echo "ok   $name: exit $rc: $(head -1 "$dir/err")"
  fi
}

row() {  # 64 pixels then a label
  local pixel="$1" label="$2" i
  for i in $(seq 64); do printf '%s,' "$pixel"; done
  echo "$label"
}

expect_error missing_file "data file not found: $dir/none.csv.gz" --data "$dir/none.csv.gz"
printf '1,2,3\n' >"$dir/short.csv"
expect_error wrong_column_count "expected 65 columns" --data "$dir/short.csv"
row x 1 >"$dir/text.csv"
expect_error non_numeric "not a number: 'x'" --data "$dir/text.csv"
{ row 3 1; row 3 10; } >"$dir/label.csv"

expect_error label_out_of_range "label.csv:2: label 10 is not an integer in 0..9" --data "$dir/label.csv"
row 17 1 >"$dir/pixel.csv"
expect_error pixel_out_of_range "pixel value 17 is outside 0..16" --data "$dir/pixel.csv"
echo "not gzip" >"$dir/bad.csv.gz"
expect_error not_gzip "gzip -dc failed" --data "$dir/bad.csv.gz"
row nan 1 >"$dir/nan.csv"
expect_error pixel_nan "pixel value nan is outside 0..16" --data "$dir/nan.csv"
head -c 3000 "${DIGITS_CSV:-/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz}" \
  >"$dir/trunc.csv.gz"
expect_error truncated_gzip "truncated or not a gzip file" --data "$dir/trunc.csv.gz"
expect_error too_few_rows "need at least --workers (4) training rows" --subset 5 --trials 0 --workers 4

for mode in sync async; do
  rc=0
  timeout -k 10 "$limit_s" "$bin" --subset 400 --trials 2 --epochs 5 --workers 2 --mode "$mode" \
    --quiet >"$dir/out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "^test accuracy: " "$dir/out"; then
    echo "FAIL end_to_end_$mode: exit $rc"; cat "$dir/out"; failures=$((failures + 1))
  else
    echo "ok   end_to_end_$mode: $(grep '^test accuracy' "$dir/out")"
  fi
done

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
