#!/usr/bin/env bash
# Installs raio into a temporary prefix and uses it the way a user would: builds
# examples/standalone_project with find_package(raio) and with pkg-config, runs both
# binaries from an unrelated directory with no LD_LIBRARY_PATH and no RAIO_ADDRESS, and
# runs the installed `raio --help`. Exits non-zero on the first thing that is wrong.
#
#   run_install_test.sh <raio build dir> <raio source dir>
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <build dir> <source dir>" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
project_dir="$source_dir/examples/standalone_project"
expected="standalone_project: result=42"
run_timeout_s=120

# mktemp under /tmp keeps paths short (unix socket paths are limited to 108 bytes).
tmp=$(mktemp -d /tmp/raio-install-test.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
prefix="$tmp/prefix"
mkdir -p "$tmp/elsewhere" "$tmp/session"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

# Runs "$@" from an unrelated working directory with a clean environment for raio:
# no RAIO_ADDRESS (so an embedded cluster starts), no LD_LIBRARY_PATH (the RPATHs must
# suffice), sessions under $tmp. Output goes to stdout; the exit status is returned.
run_clean() {
  (cd "$tmp/elsewhere" &&
    env -u RAIO_ADDRESS -u LD_LIBRARY_PATH -u RAIO_WORKER_MODE TMPDIR="$tmp/session" \
      timeout -k 10 "$run_timeout_s" "$@")
}

# Fails unless every shared library of $1 resolves, and libraio (if linked) comes from
# the installed prefix rather than the build tree.
check_libs() {
  local bin=$1 deps
  deps=$(env -u LD_LIBRARY_PATH ldd "$bin") || fail "ldd $bin failed"
  if grep -q "not found" <<<"$deps"; then
    echo "$deps" >&2
    fail "$bin has unresolved shared libraries"
  fi
  if grep -q "libraio" <<<"$deps"; then
    grep "libraio" <<<"$deps" | grep -qF "$prefix/" ||
      { echo "$deps" >&2; fail "$bin does not load libraio from $prefix"; }
  fi
}

# Fails unless the output file $1 holds the expected result line.
check_output() {
  grep -qxF "$expected" "$1" || { cat "$1" >&2; fail "no line '$expected' in the output of $2"; }
}

step "install into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
for f in include/raio/raio.h lib/libraio.so bin/raio lib/cmake/raio/raioConfig.cmake \
         lib/cmake/raio/raioConfigVersion.cmake lib/cmake/raio/raioTargets.cmake \
         lib/pkgconfig/raio.pc; do
  [[ -e "$prefix/$f" ]] || fail "missing installed file $f"
done
for f in "$prefix/lib/libraio.so" "$prefix/bin/raio"; do
  if readelf -d "$f" | grep -E "R(UN)?PATH" | grep -qF "$build_dir"; then
    fail "$f keeps an RPATH into the build tree"
  fi
done

step "installed raio CLI"
readelf -d "$prefix/bin/raio" | grep -E "R(UN)?PATH" | grep -qF '$ORIGIN/../lib' ||
  fail "bin/raio has no \$ORIGIN/../lib RPATH"
check_libs "$prefix/bin/raio"
run_clean "$prefix/bin/raio" --help >"$tmp/help.txt" 2>&1 ||
  { cat "$tmp/help.txt" >&2; fail "raio --help exited non-zero"; }
grep -qi "usage" "$tmp/help.txt" || { cat "$tmp/help.txt" >&2; fail "raio --help printed no usage"; }

step "CMake project: configure and build"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# The package registries are off so that only the temporary prefix can provide raio.
cmake -S "$project_dir" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF "${launcher[@]}" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log" >&2; fail "configuring standalone_project failed"; }
raio_dir=$(sed -n 's/^raio_DIR:PATH=//p' "$tmp/build/CMakeCache.txt")
[[ "$raio_dir" == "$prefix/lib/cmake/raio" ]] ||
  fail "find_package(raio) used '$raio_dir', not $prefix/lib/cmake/raio"
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; fail "building standalone_project failed"; }

step "CMake project: run"
check_libs "$tmp/build/app"
rc=0
run_clean "$tmp/build/app" >"$tmp/app.out" 2>"$tmp/app.err" || rc=$?
if [[ $rc -ne 0 ]]; then
  cat "$tmp/app.out" "$tmp/app.err" >&2
  fail "app (CMake build) exited with status $rc (124: timed out)"
fi
check_output "$tmp/app.out" "app (CMake build)"

step "pkg-config: compile and run"
pc_flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs raio) ||
  fail "pkg-config --cflags --libs raio failed"
echo "pkg-config: $pc_flags"
compiler=(g++)
if command -v ccache >/dev/null; then compiler=(ccache g++); fi
# shellcheck disable=SC2086  # pc_flags is a list of words
"${compiler[@]}" -std=c++20 "$project_dir/main.cc" $pc_flags -o "$tmp/app_pkgconfig" \
  >"$tmp/pc_build.log" 2>&1 || { cat "$tmp/pc_build.log" >&2; fail "pkg-config build failed"; }
check_libs "$tmp/app_pkgconfig"
rc=0
run_clean "$tmp/app_pkgconfig" >"$tmp/app_pc.out" 2>"$tmp/app_pc.err" || rc=$?
if [[ $rc -ne 0 ]]; then
  cat "$tmp/app_pc.out" "$tmp/app_pc.err" >&2
  fail "app (pkg-config build) exited with status $rc (124: timed out)"
fi
check_output "$tmp/app_pc.out" "app (pkg-config build)"

echo "PASS: install_standalone_project"
