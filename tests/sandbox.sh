#!/usr/bin/env bash
# Runs one test so that nothing it starts outlives it (ctest runs every test that starts
# processes through this: raio_sandboxed_test in cmake/RaioHelpers.cmake).
#
#   sandbox.sh TEST_TMPDIR COMMAND [ARG...]
#
# Why: at its timeout ctest SIGKILLs the one process it started. Daemons that `raio start`
# detached (setsid), drivers run in the background and their workers would live on, as would
# the network namespaces, veths and bridges of test hosts (tests/integration/test_hosts.h).
# So, as root and where unshare(1) works, COMMAND runs in namespaces of its own:
#   - a PID namespace whose init is this script (`--inner`, a bash that runs COMMAND in the
#     foreground and so reaps every orphan, as an init must: a daemon that exits is gone, not
#     a zombie that kill(pid, 0) still finds). When the init dies, the kernel kills every
#     process in the namespace.
#   - a network namespace with only `lo`, up: the ports, test-host namespaces, veths and
#     bridges that the test makes are its own and vanish with it (nothing routes out).
#   - a mount namespace with its own /proc, empty tmpfs on /dev/shm and /run/netns (where
#     `ip netns` keeps its names: two tests both at pid 2 name theirs alike), and
#     TEST_TMPDIR bind-mounted on /tmp (for code that writes to /tmp itself), unless the
#     test needs something under /tmp.
# ctest's kill reaches the init through this chain: this script dies -> unshare gets SIGKILL
# (PR_SET_PDEATHSIG, set by setpriv) -> the init gets SIGKILL (unshare --kill-child).
#
# TMPDIR is TEST_TMPDIR, emptied first and removed after COMMAND exits (kept with
# RAIO_TEST_KEEP_TMP=1). TEST_TMPDIR.owner holds "PID START_TICKS" of this script, and
# RAIO_SANDBOX_OWNER ("PID START_TICKS TEST_TMPDIR") is in the environment of everything the
# test starts: by them tests/clean_leftovers.sh tells what a killed run left from what a live
# one (another ctest on this build at the same time) uses.
# Without root or a working unshare, COMMAND runs directly after a line saying so. The exit
# status is COMMAND's; when COMMAND dies of a signal, this script dies of the same signal.
set -u

# --inner / --probe TEST_TMPDIR [COMMAND...]: the namespaces' init (PID 1). --probe only
# checks that the set-up works.
if [[ ${1:-} == --inner || ${1:-} == --probe ]]; then
  mode=$1 dir=$2
  shift 2
  ip=$(command -v ip || echo /usr/sbin/ip)
  "$ip" link set lo up &&
    mount -t tmpfs -o mode=1777,nosuid,nodev raio-shm /dev/shm &&
    mount -t tmpfs -o mode=0755,nosuid,nodev raio-netns /run/netns || exit 125
  # /tmp is left as it is when the test needs what is in it (its TMPDIR, working directory,
  # a build or an argument there): the mount would hide it.
  for path in "$dir" "$PWD" "${BASH_SOURCE[0]}" "$@"; do
    [[ $path == /tmp || $path == /tmp/* ]] && dir=
  done
  if [[ -n $dir ]]; then
    mount --bind "$dir" /tmp || exit 125
  fi
  [[ $mode == --probe ]] && exit 0
  # In the foreground, not exec'd: bash waits with waitpid(-1), which reaps the orphans
  # that the namespace hands to its init. Not `&`: bash would ignore SIGINT and SIGQUIT in
  # an asynchronous command, and the test would inherit that.
  "$@"
  exit $?
fi

if [[ $# -lt 2 ]]; then
  echo "usage: $0 TEST_TMPDIR COMMAND [ARG...]" >&2
  exit 2
fi
dir=$1
shift

# The start time of process $1 (field 22 of /proc/PID/stat, in clock ticks): with the pid,
# it names a process, where a pid alone may be reused.
start_ticks() {
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  read -r -a fields <<<"${stat##*) }"
  echo "${fields[19]}"
}
owner_alive() {  # PID START_TICKS
  [[ $# -eq 2 && $(start_ticks "$1") == "$2" ]]
}

owner="$$ $(start_ticks $$)"
mkdir -p "$(dirname "$dir")"
# The same test run by another ctest on this build at the same time keeps its directory.
if [[ -f $dir.owner ]] && read -r other_pid other_ticks <"$dir.owner" &&
   owner_alive "$other_pid" "$other_ticks"; then
  dir=$dir.$$
fi
# (A second try: clean_leftovers.sh may remove the empty test-tmp between mkdir and echo.)
echo "$owner" >"$dir.owner" 2>/dev/null ||
  { mkdir -p "$(dirname "$dir")" && echo "$owner" >"$dir.owner"; } || exit 125
rm -rf "$dir"
mkdir -p "$dir" || exit 125
export TMPDIR=$dir RAIO_SANDBOX_OWNER="$owner $dir"

why_not=
if [[ $EUID -ne 0 ]]; then
  why_not="not root"
elif ! command -v unshare >/dev/null || ! command -v setpriv >/dev/null; then
  why_not="no unshare or setpriv (util-linux)"
else
  mkdir -p /run/netns 2>/dev/null
  if ! probe=$(unshare --pid --fork --kill-child --mount-proc --net -- \
                 bash "${BASH_SOURCE[0]}" --probe "$dir" 2>&1); then
    why_not="the namespaces cannot be set up: ${probe:-unshare failed}"
  fi
fi

if [[ -z $why_not ]]; then
  setpriv --pdeathsig KILL -- unshare --pid --fork --kill-child --mount-proc --net -- \
    bash "${BASH_SOURCE[0]}" --inner "$dir" "$@"
  status=$?
else
  echo "sandbox.sh: $why_not; running the test directly: cleanup is not kill-proof" \
       "(what it starts can outlive it if it is killed)" >&2
  "$@"
  status=$?
fi

if [[ ${RAIO_TEST_KEEP_TMP:-} != 1 ]]; then
  rm -rf "$dir"
  rm -f "$dir.owner"
fi
# 128+N from bash means "killed by signal N": die of it too, so that ctest reports it as
# such (only the signals whose default action ends a process; no core file of our own).
if ((status > 128 && status <= 128 + 15)); then
  ulimit -c 0
  kill -n $((status - 128)) $$
fi
exit "$status"
