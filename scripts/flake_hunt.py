#!/usr/bin/env python3
"""Runs built test suites again and again with one core kept busy; counts failures per case.

    flake_hunt.py [--busy-cores 1] DIR:REPS[:CTEST_ARGS] ...

e.g. `flake_hunt.py build:10 build-asan:3:"-E install_standalone_project" build-tsan:3`.
Each repetition is one `ctest -j 2 -LE slow` of that build directory (no reruns: a flake
counts), while --busy-cores processes spin, as a loaded CI machine would. Prints a table
of every test and GoogleTest case that failed at least once: build, test, case, failures,
repetitions; exit status 1 when any failed. docs/design/testing.md says how to read it.
"""
import argparse
import collections
import multiprocessing
import os
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_tests import failed_cases, read_junit  # noqa: E402


def spin():
    while True:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--busy-cores", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("runs", nargs="+", help="DIR:REPS[:EXTRA_CTEST_ARGS]")
    a = p.parse_args()
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(a.busy_cores)]
    for b in busy:
        b.start()
    counts = collections.Counter()  # (dir, test, case) -> failures
    reps_of = {}
    start = time.monotonic()
    try:
        for spec in a.runs:
            parts = spec.split(":", 2)
            build_dir, reps = parts[0], int(parts[1]) if len(parts) > 1 else 1
            extra = shlex.split(parts[2]) if len(parts) > 2 else []
            reps_of[build_dir] = reps
            for rep in range(1, reps + 1):
                junit = os.path.abspath(os.path.join(build_dir, "flake-hunt.xml"))
                if os.path.exists(junit):
                    os.remove(junit)
                cmd = ["ctest", "--test-dir", build_dir, "-j", str(a.jobs), "-LE", "slow",
                       "--output-on-failure", "--test-output-size-failed", "4000000",
                       "--output-junit", junit] + extra
                t0 = time.monotonic()
                with open(os.path.join(build_dir, f"flake-hunt-{rep}.log"), "w") as log:
                    rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
                results = read_junit(junit) or [("(ctest)", "failed", f"exit {rc}")]
                bad = [(n, out) for n, st, out in results if st == "failed"]
                for name, out in bad:
                    cases = failed_cases(out)
                    if cases:
                        for c in cases:
                            counts[(build_dir, name, c)] += 1
                    else:
                        # A crash or timeout: name the case that never ended, if any.
                        running = re.findall(r"^\[ RUN      \] (\S+)", out, re.M)
                        counts[(build_dir, name, (running[-1] + " (crash/timeout)")
                                if running else "(whole test)")] += 1
                print(f"{build_dir} rep {rep}/{reps}: {len(results) - len(bad)} passed, "
                      f"{len(bad)} failed ({time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        for b in busy:
            b.terminate()
    print(f"\nflake hunt: {time.monotonic() - start:.0f} s, {a.busy_cores} core(s) kept busy")
    print(f"{'build':<12} {'test':<34} {'case':<60} failures")
    for build_dir, reps in reps_of.items():
        rows = [(k, v) for k, v in counts.items() if k[0] == build_dir]
        if not rows:
            print(f"{build_dir:<12} {'(all)':<34} {'(all)':<60} 0/{reps}")
        for (d, t, c), v in sorted(rows):
            print(f"{d:<12} {t:<34} {c:<60} {v}/{reps}")
    return 1 if counts else 0


if __name__ == "__main__":
    sys.exit(main())
