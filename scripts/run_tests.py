#!/usr/bin/env python3
"""Runs a build's ctest suite, reruns each failed test's failed cases once, and reports.

    run_tests.py --build-dir DIR [--stage NAME] [--summary FILE] [-- CTEST_ARGS...]

1. `ctest --test-dir DIR --output-on-failure --output-junit ... CTEST_ARGS` (streamed).
2. Each failed test is rerun once, alone: a GoogleTest binary with only its failed cases
   (GTEST_FILTER, read from the `[  FAILED  ]` lines of its output); the whole test when its
   cases are unknown (a crash, a timeout, a script).
3. A test that passes on the rerun is FLAKY (the run still passes; every FLAKY test is a
   defect to fix or name); one that fails twice is FAILED, and the run fails.

The summary goes to stdout and, with --summary FILE, is appended to FILE as lines
`FLAKY|FAILED <stage> <test> <cases>` with the tail of the failing output after each FAILED
line (indented), which .ci/run prints at the end. Exit status: 0 when nothing FAILED.
"""
import argparse
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

FAILED_CASE = re.compile(r"^\[  FAILED  \] ([A-Za-z_][\w/]*\.[\w/]+)(?:,| \(|\s*$)", re.M)
RUN_CASE = re.compile(r"^\[ RUN      \] ([A-Za-z_][\w/]*\.[\w/]+)\s*$", re.M)
ENDED_CASE = re.compile(r"^\[ *(?:OK|FAILED|SKIPPED) *\] ([A-Za-z_][\w/]*\.[\w/]+)", re.M)
TAIL_LINES = 60


def run_ctest(build_dir, junit, args, env=None):
    cmd = ["ctest", "--test-dir", build_dir, "--output-on-failure", "--output-junit", junit,
           "--test-output-size-failed", "4000000"]
    cmd += args
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=env)


def read_junit(path):
    """[(name, status, output)] with status one of passed, failed, skipped."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"run_tests: cannot read {path}: {e}", flush=True)
        return None
    results = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        status = case.get("status", "run")
        out = "".join(e.text or "" for e in case.iter("system-out"))
        if case.find("failure") is not None or status == "fail":
            results.append((name, "failed", out))
        elif status in ("disabled", "notrun") and case.find("skipped") is not None:
            results.append((name, "skipped", out))
        elif status == "notrun":
            results.append((name, "failed", out or "not run"))
        else:
            results.append((name, "passed", out))
    return results


def failed_cases(output):
    """The failed GoogleTest cases in `output`, or None when a case never ended (a crash or a
    kill at the timeout) or none is named (not a GoogleTest binary): rerun the whole test."""
    started = RUN_CASE.findall(output)
    ended = set(ENDED_CASE.findall(output))
    if any(c not in ended for c in started):
        return None
    cases = sorted(set(FAILED_CASE.findall(output)))
    return cases or None


def tail(text, n=TAIL_LINES):
    lines = text.rstrip("\n").split("\n")
    return "\n".join(lines[-n:])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", required=True)
    p.add_argument("--stage", default="test")
    p.add_argument("--summary", default=os.environ.get("RAIO_CI_SUMMARY"))
    p.add_argument("ctest_args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    args = [x for x in a.ctest_args if x != "--"] if a.ctest_args[:1] == ["--"] else a.ctest_args
    build_dir = os.path.abspath(a.build_dir)
    junit = os.path.join(build_dir, f"ctest-{a.stage}.xml")
    if os.path.exists(junit):
        os.remove(junit)
    start = time.monotonic()
    rc = run_ctest(build_dir, junit, args)
    results = read_junit(junit)
    if results is None or not results:
        print(f"run_tests: ctest exited {rc} and reported no test", flush=True)
        write_summary(a, [], [("(ctest)", None, f"ctest exited {rc}, no test results")], 0)
        return 1
    failed = [(n, out) for n, st, out in results if st == "failed"]
    passed = sum(1 for _, st, _ in results if st == "passed")
    flaky, hard = [], []
    for name, out in failed:
        cases = failed_cases(out)
        env = dict(os.environ)
        if cases:
            env["GTEST_FILTER"] = ":".join(cases)
        what = ":".join(cases) if cases else "(whole test)"
        print(f"\nrun_tests: rerunning {name} {what}", flush=True)
        rerun_xml = os.path.join(build_dir, f"ctest-{a.stage}-rerun.xml")
        if os.path.exists(rerun_xml):
            os.remove(rerun_xml)
        run_ctest(build_dir, rerun_xml, ["-R", "^" + re.escape(name) + "$"], env)
        again = read_junit(rerun_xml) or [(name, "failed", "rerun reported nothing")]
        if all(st == "passed" for _, st, _ in again):
            flaky.append((name, cases, tail(out)))
        else:
            hard.append((name, cases, tail(again[0][2] or out)))
    took = time.monotonic() - start
    print(f"\n=== {a.stage}: {passed + len(flaky)} passed ({len(flaky)} flaky), "
          f"{len(hard)} failed, {took:.0f} s ===", flush=True)
    for name, cases, _ in flaky:
        print(f"FLAKY  {name} {':'.join(cases) if cases else '(whole test)'}")
    for name, cases, _ in hard:
        print(f"FAILED {name} {':'.join(cases) if cases else '(whole test)'}")
    write_summary(a, flaky, hard, passed + len(flaky))
    return 1 if hard else 0


def write_summary(a, flaky, hard, passed):
    if not a.summary:
        return
    with open(a.summary, "a") as f:
        f.write(f"COUNT {a.stage} {passed} {len(hard)}\n")
        for name, cases, _ in flaky:
            f.write(f"FLAKY {a.stage} {name} {':'.join(cases) if cases else '(whole test)'}\n")
        for name, cases, out in hard:
            f.write(f"FAILED {a.stage} {name} {':'.join(cases) if cases else '(whole test)'}\n")
            for line in (out or "").split("\n"):
                f.write("    " + line + "\n")


if __name__ == "__main__":
    sys.exit(main())
