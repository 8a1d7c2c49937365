#!/usr/bin/env python3
"""The jobs API's latency and burst figures (docs/design/jobs.md), `make bench`'s last part.

Usage: jobs_bench.py RAIO_CLI [--burst N] [--runs N]

Starts `raio start --head --dashboard-port 0` in a private TMPDIR and, through plain HTTP:
  - the first job (raio-jobs joins the cluster as a driver at its first submission),
  - submit-to-RUNNING of a trivial job (`true`), median and p90 of --runs sequential jobs:
    the record's start_time (the supervisor forked the shell) less its submit_time, and the
    client's view (POST until GET first shows it started or ended, polled every 2 ms);
    its floor is the start of a process that does nothing (fork+exec of /bin/true here);
  - a burst of --burst jobs (`true`) submitted at once from as many threads: errors, the
    time until all have started and until all ended.
Prints a table; stops the cluster.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def main():
    raio = sys.argv[1]
    burst = int(sys.argv[sys.argv.index("--burst") + 1]) if "--burst" in sys.argv else 100
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 20
    tmp = tempfile.mkdtemp(prefix="raio-jobs-bench-")
    env = dict(os.environ, TMPDIR=tmp)
    for name in ("RAIO_ADDRESS", "RAIO_API_SERVER_ADDRESS"):
        env.pop(name, None)
    out = subprocess.run([raio, "start", "--head", "--port", "0", "--dashboard-port", "0"],
                         env=env, capture_output=True, text=True, check=True)
    api = json.load(open(os.path.join(tmp, "raio", "current_cluster")))["dashboard_address"]

    def http(method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(api + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def wait(job_id, pred, interval=0.002):
        while True:
            _, j = http("GET", "/api/jobs/" + job_id)
            if pred(j):
                return j
            time.sleep(interval)

    started = lambda j: j["status"] != "PENDING"
    ended = lambda j: j["status"] in ("SUCCEEDED", "FAILED", "STOPPED")
    rows = []
    try:
        t0 = time.monotonic()
        _, r = http("POST", "/api/jobs/", {"entrypoint": "true"})
        wait(r["submission_id"], started)
        rows.append(("first job: submit to RUNNING (raio-jobs joins the cluster)",
                     "%.0f ms" % ((time.monotonic() - t0) * 1e3), "-"))
        wait(r["submission_id"], ended)
        server, client = [], []
        for _ in range(runs):
            t0 = time.monotonic()
            _, r = http("POST", "/api/jobs/", {"entrypoint": "true"})
            wait(r["submission_id"], started)
            client.append((time.monotonic() - t0) * 1e3)
            j = wait(r["submission_id"], ended)
            server.append(j["start_time"] - j["submit_time"])
        floor = []
        for _ in range(20):
            t0 = time.monotonic()
            subprocess.run(["/bin/true"])
            floor.append((time.monotonic() - t0) * 1e3)
        p90 = lambda xs: sorted(xs)[int(0.9 * (len(xs) - 1))]
        rows.append(("submit to RUNNING, record (start_time - submit_time), median / p90",
                     "%.0f / %.0f ms" % (statistics.median(server), p90(server)),
                     "target < 100 ms + program start"))
        rows.append(("submit to RUNNING, client (POST .. GET shows it), median / p90",
                     "%.1f / %.1f ms" % (statistics.median(client), p90(client)),
                     "floor: fork+exec /bin/true %.1f ms" % statistics.median(floor)))
        results = [None] * burst

        def submit(i):
            results[i] = http("POST", "/api/jobs/", {"entrypoint": "true",
                                                     "submission_id": "burst-%d" % i})

        t0 = time.monotonic()
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(burst)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        submitted = time.monotonic() - t0
        errors = sum(1 for s, _ in results if s != 200)

        def count(pred):
            _, jobs = http("GET", "/api/jobs/")
            return sum(1 for j in jobs if j["submission_id"].startswith("burst-") and pred(j))

        while count(started) < burst - errors:
            time.sleep(0.01)
        all_started = time.monotonic() - t0
        while count(ended) < burst - errors:
            time.sleep(0.01)
        all_ended = time.monotonic() - t0
        failed = count(lambda j: j["status"] != "SUCCEEDED")
        rows.append(("burst of %d jobs: HTTP errors / jobs not SUCCEEDED" % burst,
                     "%d / %d" % (errors, failed), "0 / 0"))
        rows.append(("burst of %d jobs: all submitted / all RUNNING / all ended" % burst,
                     "%.2f / %.2f / %.2f s" % (submitted, all_started, all_ended), "-"))
    finally:
        subprocess.run([raio, "stop"], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print("%-*s  %-22s  %s" % (width, "jobs API (%d CPUs)" % os.cpu_count(), "result",
                                "peer / target"))
    for name, value, peer in rows:
        print("%-*s  %-22s  %s" % (width, name, value, peer))


if __name__ == "__main__":
    main()
