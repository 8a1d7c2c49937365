#!/usr/bin/env bash
# `make bench-peers`: raio_bench and dask_bench (Dask distributed on a LocalCluster) on this
# machine, then bench/compare_peers.py prints them side by side and writes
# bench/results/peers-<UTC timestamp>.json. Usage: bench/peers.sh [RELEASE_DIR] [raio_bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
RELEASE_DIR=${1:-build-release}
shift || true
PY=/usr/bin/python3  # Debian's python3-distributed, not pyenv's python3 on PATH

if ! dpkg -s python3-distributed >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "bench-peers: installing python3-distributed"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-distributed
fi

tmp=$(mktemp -d)
dask_pid=""
cleanup() {
  # dask_bench.py leads its own process group; kill whatever of it is left, by group id.
  if [ -n "$dask_pid" ]; then kill -KILL -- "-$dask_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "== raio_bench =="
"$RELEASE_DIR/bench/raio_bench" --json="$tmp/raio.json" "$@"

echo "== dask_bench =="
"$PY" bench/dask_bench.py --out "$tmp/dask.json" &
dask_pid=$!
dask_rc=0
wait "$dask_pid" || dask_rc=$?
left=$(pgrep -g "$dask_pid" || true)
if [ -n "$left" ]; then
  echo "bench-peers: killing leftover Dask processes: $(echo $left)"
  kill -KILL -- "-$dask_pid" 2>/dev/null || true
fi
dask_pid=""
[ "$dask_rc" -eq 0 ] || echo "bench-peers: dask_bench exited with $dask_rc (partial results)"

"$PY" bench/compare_peers.py "$tmp/raio.json" "$tmp/dask.json"
