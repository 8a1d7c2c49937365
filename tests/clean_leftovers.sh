#!/usr/bin/env bash
# The raio_cleanup ctest fixture (tests/CMakeLists.txt): removes what killed runs of this
# build's tests left behind. ctest runs it before the first test that starts processes and
# again after the last.
#
#   clean_leftovers.sh BUILD_DIR
#
# A test killed inside tests/sandbox.sh leaves only its TMPDIR: the kernel ends its processes
# and namespaces. One run outside a sandbox (not root, no unshare) can leave more. Removed:
#   - processes whose RAIO_SANDBOX_OWNER names a sandbox.sh of this build that no longer runs
#     (whatever their executable: a `sleep` a test started is as much a leftover);
#     Raio daemons of this build without one (session leaders, as `raio start` makes them,
#     whose executable is under BUILD_DIR, outside any sandbox) are only listed: they were
#     started by hand or by a test binary run outside ctest, perhaps one running now, and a
#     sandboxed test does not see them anyway (its own network, /tmp and TMPDIR);
#   - test hosts (tests/integration/test_hosts.h) of test processes that no longer run:
#     network namespaces raiot-PID-I with what runs in them, veths rtvPID-I, bridges rtbPID
#     and the directories raiot-PID in /tmp and $TMPDIR;
#   - /dev/shm entries raio-...-PID-... of processes that no longer run;
#   - BUILD_DIR/test-tmp/NAME (and NAME.owner) of sandboxes that no longer run.
# What a live run uses (another ctest on this build at the same time) is left alone: its
# sandbox.sh still runs. Says what it removed; exits 0 unless misused (a leftover it cannot
# remove is reported, not fatal: the tests may still pass).
set -u
if [[ $# -ne 1 || ! -d $1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd -P)
tmp_root=$build/test-tmp
removed=0
note() {
  echo "clean_leftovers: $*"
  removed=$((removed + 1))
}

# The start time of process $1 (field 22 of /proc/PID/stat), and the session (field 6).
stat_field() {  # PID INDEX (0 = field 3, the state)
  local stat fields
  { stat=$(<"/proc/$1/stat"); } 2>/dev/null || return 1
  read -r -a fields <<<"${stat##*) }"
  echo "${fields[$2]}"
}
owner_alive() {  # PID START_TICKS
  [[ $# -ge 2 && $(stat_field "$1" 19 2>/dev/null) == "$2" ]]
}
runs() {  # PID: it exists and is not a zombie
  local state
  state=$(stat_field "$1" 0 2>/dev/null) && [[ $state != Z && $state != X ]]
}

# ---- processes
self_pidns=$(readlink /proc/self/ns/pid)
victims=()
for proc in /proc/[0-9]*; do
  pid=${proc#/proc/}
  [[ $pid == "$$" ]] && continue
  mapfile -d "" environ 2>/dev/null <"$proc/environ" || continue
  marker=
  for kv in "${environ[@]}"; do
    if [[ $kv == RAIO_SANDBOX_OWNER=* ]]; then
      marker=${kv#RAIO_SANDBOX_OWNER=}
      break
    fi
  done
  if [[ -z $marker ]]; then
    [[ $(stat_field "$pid" 3 2>/dev/null) == "$pid" ]] || continue  # not a session leader
    [[ $(readlink "$proc/ns/pid" 2>/dev/null) == "$self_pidns" ]] || continue
    exe=$(readlink "$proc/exe" 2>/dev/null) || continue
    [[ $exe == "$build"/* ]] || continue
    runs "$pid" || continue
    cmd=$(tr "\\0" " " 2>/dev/null <"$proc/cmdline")
    echo "clean_leftovers: left alone: process $pid (${cmd:0:100}), a daemon of this build" \
         "not started through sandbox.sh; kill it if it is a leftover"
    continue
  fi
  read -r owner_pid owner_ticks owner_dir <<<"$marker"
  [[ ${owner_dir:-} == "$tmp_root"/* ]] || continue  # another build's
  owner_alive "$owner_pid" "$owner_ticks" && continue
  runs "$pid" || continue
  cmd=$(tr "\\0" " " 2>/dev/null <"$proc/cmdline")
  note "killing process $pid (${cmd:0:100})"
  kill -KILL "$pid" 2>/dev/null
  victims+=("$pid")
done
for _ in $(seq 100); do
  left=()
  for pid in "${victims[@]}"; do
    runs "$pid" && left+=("$pid")
  done
  [[ ${#left[@]} -eq 0 ]] && break
  sleep 0.1
done
if [[ ${#victims[@]} -gt 0 && ${#left[@]} -gt 0 ]]; then
  echo "clean_leftovers: still running after SIGKILL: ${left[*]}"
fi

# ---- test hosts (in this network namespace)
ip=$(command -v ip || echo /usr/sbin/ip)
if [[ $EUID -eq 0 && -x $ip ]]; then
  for path in /run/netns/raiot-*; do
    [[ -e $path ]] || continue
    name=${path##*/}
    [[ $name =~ ^raiot-([0-9]+)-[0-9]+$ ]] || continue
    [[ -e /proc/${BASH_REMATCH[1]} ]] && continue
    for pid in $("$ip" netns pids "$name" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null
    done
    "$ip" netns del "$name" 2>/dev/null || rm -f "$path"
    note "removed network namespace $name"
  done
  while read -r _ name _; do
    name=${name%:}
    name=${name%%@*}
    [[ $name =~ ^rtb([0-9]+)$ || $name =~ ^rtv([0-9]+)-[0-9]+$ ]] || continue
    [[ -e /proc/${BASH_REMATCH[1]} ]] && continue
    # A veth goes with its peer's namespace, asynchronously: it may be gone already.
    "$ip" link del "$name" 2>/dev/null && note "removed link $name"
  done < <("$ip" -o link show 2>/dev/null)
fi
for base in /tmp "${TMPDIR:-/tmp}"; do
  for path in "$base"/raiot-*; do
    [[ -d $path && ${path##*/} =~ ^raiot-([0-9]+)$ ]] || continue
    [[ -e /proc/${BASH_REMATCH[1]} ]] && continue
    rm -rf "$path" && note "removed $path"
  done
done

# ---- /dev/shm
for path in /dev/shm/raio-*; do
  [[ -e $path ]] || continue
  [[ ${path##*/} =~ ^raio-[A-Za-z_]+(-[A-Za-z_]+)*-([0-9]+)(-.*)?$ ]] || continue
  [[ -e /proc/${BASH_REMATCH[2]} ]] && continue
  rm -rf "$path" && note "removed $path"
done

# ---- test TMPDIRs
if [[ -d $tmp_root ]]; then
  for path in "$tmp_root"/*; do
    [[ -e $path ]] || continue
    if [[ $path == *.owner ]]; then
      dir=${path%.owner}
      read -r owner_pid owner_ticks 2>/dev/null <"$path" &&
        owner_alive "$owner_pid" "$owner_ticks" && continue
      rm -rf "$dir" "$path"
      note "removed ${dir#"$build"/}"
    elif [[ ! -e $path.owner ]]; then
      rm -rf "$path"
      note "removed ${path#"$build"/}"
    fi
  done
  rmdir "$tmp_root" 2>/dev/null
fi

[[ $removed -eq 0 ]] && echo "clean_leftovers: nothing left by earlier runs"
exit 0
