#!/usr/bin/env python3
"""Integration tests of the jobs API against a real `raio start` cluster on this machine.

Usage: jobs_test.py RAIO_CLI JOB_EXAMPLE {http|cli}

  http: the REST routes through plain HTTP (urllib): the life of a job, env_vars, bad
        input (each with its HTTP status and JSON error), 50 jobs submitted at once.
  cli:  `raio job ...`: a C++ program shipped as a working directory whose task runs on
        another node, logs streamed while the job runs, stop of a running job with its
        actor gone afterwards, list and delete, errors.

Each mode starts a head (jobs API on a free port, --dashboard-port 0) and a second node in
a private TMPDIR, and stops them at the end. Waits poll with a deadline; nothing sleeps
to synchronise. Every deadline and every timeout the test gives the cluster is multiplied by
RAIO_TEST_TIME_SCALE, else RAIO_BUILD_TIME_SCALE (the one test time scale,
src/raio/testkit/time_scale.h; ctest sets the latter
per build: larger under sanitizers; default 1).
"""
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

RAIO = EXAMPLE = None
CLUSTER = None


def _time_scale():
    try:
        value = float(os.environ.get("RAIO_TEST_TIME_SCALE") or os.environ.get("RAIO_BUILD_TIME_SCALE") or "1")
    except ValueError:
        return 1.0
    return value if value > 0 else 1.0


TIME_SCALE = _time_scale()


def scaled(seconds):
    """`seconds` times the test time scale (never less than `seconds`)."""
    return seconds * max(TIME_SCALE, 1.0)


def wait_for(what, predicate, timeout=30.0, interval=0.05):
    """Polls `predicate` until it returns a true value, which it returns; fails after
    scaled(timeout) (the timeout is scaled here: callers pass the unscaled bound)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


class JobsApi:
    """Plain-HTTP calls to the jobs API at self.api (a head's dashboard address)."""

    def http(self, method, path, body=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        req = urllib.request.Request(self.api + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=scaled(60)) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def job(self, job_id):
        status, j = self.http("GET", "/api/jobs/" + job_id)
        assert status == 200, (status, j)
        return j


class Cluster(JobsApi):
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="raio-jobs-test-")
        # The product timeouts the test sets, scaled as its own deadlines are.
        self.env = dict(os.environ, TMPDIR=self.tmp, RAIO_JOBS_MAX_PACKAGE_BYTES="50000000",
                        RAIO_JOBS_STOP_GRACE_MS=str(int(scaled(1000))),
                        RAIO_JOBS_REQUEST_TIMEOUT_MS=str(int(scaled(3000))))
        for name in ("RAIO_ADDRESS", "RAIO_API_SERVER_ADDRESS", "RAIO_NODE_ID"):
            self.env.pop(name, None)
        out = self.raio("start", "--head", "--port", "0", "--dashboard-port", "0",
                        "--num-cpus", "2", "--resources", '{"head_node": 1}', check=True)
        self.address = out.stdout.split("started at ")[1].split()[0]
        record = json.load(open(os.path.join(self.tmp, "raio", "current_cluster")))
        self.api = record["dashboard_address"]
        assert out.stdout.count(self.api) == 1, out.stdout
        self.raio("start", "--address", self.address, "--node-ip", "127.0.0.1", "--num-cpus",
                  "2", "--resources", '{"worker_node": 1}', check=True)

    def raio(self, *args, check=False, timeout=120):
        r = subprocess.run([RAIO] + list(args), env=self.env, capture_output=True,
                           encoding="utf-8", errors="replace",
                           timeout=scaled(timeout))
        if check and r.returncode != 0:
            raise AssertionError("raio %s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                                r.stdout, r.stderr))
        return r

    def wait_terminal(self, job_id, timeout=60):
        return wait_for("job %s to end" % job_id,
                        lambda: (lambda j: j if j["status"] in ("SUCCEEDED", "FAILED", "STOPPED")
                                 else None)(self.job(job_id)), timeout)

    def stop(self):
        r = self.raio("stop")
        shutil.rmtree(self.tmp, ignore_errors=True)
        return r


def pid_runs(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class HttpTest(unittest.TestCase):
    def test_version(self):
        status, j = CLUSTER.http("GET", "/api/version")
        self.assertEqual(status, 200)
        self.assertIn("version", j)

    def test_job_life_with_env_vars(self):
        status, j = CLUSTER.http("POST", "/api/jobs/", {
            "entrypoint": "echo hello $FOO; echo to-stderr >&2",
            "submission_id": "life-1", "metadata": {"owner": "test"},
            "runtime_env": {"env_vars": {"FOO": "bar"}}})
        self.assertEqual(status, 200, j)
        self.assertEqual(j["submission_id"], "life-1")
        job = CLUSTER.wait_terminal("life-1")
        self.assertEqual(job["status"], "SUCCEEDED", job)
        self.assertEqual(job["driver_exit_code"], 0)
        self.assertEqual(job["metadata"], {"owner": "test"})
        self.assertIsNotNone(job["start_time"])
        self.assertGreaterEqual(job["end_time"], job["start_time"])
        status, logs = CLUSTER.http("GET", "/api/jobs/life-1/logs")
        self.assertEqual(status, 200)
        self.assertIn("hello bar\n", logs["logs"])
        self.assertIn("to-stderr\n", logs["logs"])
        status, jobs = CLUSTER.http("GET", "/api/jobs/")
        self.assertIn("life-1", [j["submission_id"] for j in jobs])
        self.assertEqual(CLUSTER.http("DELETE", "/api/jobs/life-1")[0], 200)
        self.assertEqual(CLUSTER.http("GET", "/api/jobs/life-1")[0], 404)

    def test_exec_failure_names_its_errno_and_long_entrypoints_are_refused(self):
        # Broke: exec's E2BIG read as "exit 127 (the shell did not find the command)".
        status, j = CLUSTER.http("POST", "/api/jobs/", {
            "entrypoint": "true", "submission_id": "e2big-1",
            "runtime_env": {"env_vars": {"BIG": "x" * 200000}}})
        self.assertEqual(status, 200, j)
        job = CLUSTER.wait_terminal("e2big-1")
        self.assertEqual(job["status"], "FAILED", job)
        self.assertIn("Argument list too long", job["message"])
        self.assertNotIn("did not find", job["message"])
        status, j = CLUSTER.http("POST", "/api/jobs/", {"entrypoint": "#" * 200000})
        self.assertEqual(status, 400, j)
        self.assertIn("65536", j["error"])
        status, j = CLUSTER.http("POST", "/api/jobs/", {
            "entrypoint": "true", "runtime_env": {"env_vars": {"RAIO_ADDRESS": "x"}}})
        self.assertEqual(status, 400, j)
        self.assertIn("RAIO_ADDRESS", j["error"])

    def test_a_request_trickled_slowly_is_answered_408_and_closed(self):
        # Broke: a client sending partial headers held a server thread forever.
        host, port = CLUSTER.api.split("//")[1].split(":")
        with socket.create_connection((host, int(port)), timeout=scaled(30)) as s:
            s.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n")
            got = b""
            while True:
                chunk = s.recv(4096)  # the server closes within its request deadline
                if not chunk:
                    break
                got += chunk
        self.assertTrue(got.startswith(b"HTTP/1.1 408"), got)
        self.assertEqual(CLUSTER.http("GET", "/api/version")[0], 200)

    def test_bad_input(self):
        status, j = CLUSTER.http("POST", "/api/jobs/", raw=b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("error", j)
        status, j = CLUSTER.http("POST", "/api/jobs/", {"entrypoint": "true",
                                                         "runtime_env": {"pip": ["x"]}})
        self.assertEqual(status, 400)
        self.assertIn("pip", j["error"])
        for method, path in (("GET", "/api/jobs/nope"), ("GET", "/api/jobs/nope/logs"),
                             ("POST", "/api/jobs/nope/stop"), ("DELETE", "/api/jobs/nope")):
            status, j = CLUSTER.http(method, path)
            self.assertEqual(status, 404, path)
            self.assertIn("nope", j["error"])
        gate = os.path.join(CLUSTER.tmp, "gate-dup")
        body = {"entrypoint": "while [ ! -f %s ]; do sleep 0.05; done" % gate,
                "submission_id": "dup"}
        self.assertEqual(CLUSTER.http("POST", "/api/jobs/", body)[0], 200)
        status, j = CLUSTER.http("POST", "/api/jobs/", body)
        self.assertEqual(status, 409)
        self.assertIn("dup", j["error"])
        wait_for("dup to run", lambda: CLUSTER.job("dup")["status"] == "RUNNING")
        status, j = CLUSTER.http("DELETE", "/api/jobs/dup")
        self.assertEqual(status, 400)
        self.assertIn("RUNNING", j["error"])
        open(gate, "w").close()
        self.assertEqual(CLUSTER.wait_terminal("dup")["status"], "SUCCEEDED")
        status, j = CLUSTER.http("POST", "/api/jobs/", {"entrypoint": "no-such-command-xyz",
                                                         "submission_id": "missing"})
        self.assertEqual(status, 200)
        job = CLUSTER.wait_terminal("missing")
        self.assertEqual(job["status"], "FAILED")
        self.assertEqual(job["driver_exit_code"], 127)
        self.assertIn("not found", job["message"])
        status, j = CLUSTER.http("PUT", "/api/packages/gcs/_raio_pkg_big.zip",
                                 raw=b"x" * 50000001)
        self.assertEqual(status, 413)
        self.assertIn("limit", j["error"])
        status, j = CLUSTER.http("POST", "/api/jobs/", {
            "entrypoint": "true", "runtime_env": {"working_dir": "gcs://_raio_pkg_none.zip"}})
        self.assertEqual(status, 400)
        # The server still answers.
        self.assertEqual(CLUSTER.http("GET", "/api/version")[0], 200)

    def test_fifty_jobs_at_once_all_end(self):
        results = [None] * 50

        def submit(i):
            results[i] = CLUSTER.http("POST", "/api/jobs/", {
                "entrypoint": "echo job-%d" % i, "submission_id": "many-%d" % i})

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual([r[0] for r in results], [200] * 50, results)

        def all_done():
            _, jobs = CLUSTER.http("GET", "/api/jobs/")
            mine = [j for j in jobs if j["submission_id"].startswith("many-")]
            done = [j for j in mine if j["status"] in ("SUCCEEDED", "FAILED", "STOPPED")]
            return mine if len(done) == 50 else None

        jobs = wait_for("50 jobs to end", all_done, timeout=120, interval=0.2)
        failed = {j["submission_id"]: (j["status"], j["message"]) for j in jobs
                  if j["status"] != "SUCCEEDED"}
        self.assertEqual(len(failed), 0, "\n".join("%s %s: %s" % (k, s, m) for k, (s, m) in failed.items()))
        for i in (0, 17, 49):
            self.assertEqual(CLUSTER.http("GET", "/api/jobs/many-%d/logs" % i)[1]["logs"],
                             "job-%d\n" % i)


class CliTest(unittest.TestCase):
    def working_dir(self, name):
        d = os.path.join(CLUSTER.tmp, name)
        os.makedirs(d)
        shutil.copy2(EXAMPLE, os.path.join(d, "job_example"))
        with open(os.path.join(d, "input.txt"), "w") as f:
            f.write("hello from input\n")
        os.makedirs(os.path.join(d, "build"))
        open(os.path.join(d, "build", "ignored.o"), "w").close()
        return d

    def test_cpp_program_in_working_dir_runs_a_task_on_another_node(self):
        d = self.working_dir("wd1")
        env = json.dumps({"env_vars": {"GREETING": "hi", "JOB_EXAMPLE_RESOURCE": "worker_node"},
                          "excludes": ["build"]})
        r = CLUSTER.raio("job", "submit", "--submission-id", "cpp-1", "--working-dir", d,
                         "--runtime-env-json", env, "--", "./job_example")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        driver = [l for l in r.stdout.splitlines() if l.startswith("driver:")]
        task = [l for l in r.stdout.splitlines() if l.startswith("task:")]
        self.assertEqual(len(driver), 1, r.stdout)
        self.assertEqual(len(task), 1, r.stdout)
        self.assertIn("read 'hello from input' greeting 'hi'", driver[0])
        self.assertIn("read 'hello from input' greeting 'hi'", task[0])
        self.assertNotEqual(driver[0].split()[2], task[0].split()[2],
                            "the task ran on the driver's node")
        self.assertIn("SUCCEEDED", r.stderr)
        s = CLUSTER.raio("job", "status", "cpp-1", "--json")
        self.assertEqual(json.loads(s.stdout)["status"], "SUCCEEDED")

    def test_logs_stream_while_the_job_runs(self):
        gate = os.path.join(CLUSTER.tmp, "gate-stream")
        r = CLUSTER.raio("job", "submit", "--no-wait", "--submission-id", "stream-1", "--",
                         "echo first; while [ ! -f %s ]; do sleep 0.05; done; echo second" % gate)
        self.assertEqual(r.returncode, 0, r.stderr)
        follow = subprocess.Popen([RAIO, "job", "logs", "--follow", "stream-1"], env=CLUSTER.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([follow.stdout], [], [], scaled(30))
            self.assertTrue(ready, "no log line within %.0f s" % scaled(30))
            self.assertEqual(follow.stdout.readline(), "first\n")
            self.assertEqual(CLUSTER.job("stream-1")["status"], "RUNNING")
            open(gate, "w").close()
            ready, _, _ = select.select([follow.stdout], [], [], scaled(30))
            self.assertTrue(ready)
            self.assertEqual(follow.stdout.readline(), "second\n")
            self.assertEqual(follow.wait(timeout=scaled(30)), 0)
        finally:
            follow.kill()
            follow.wait()
        self.assertEqual(CLUSTER.wait_terminal("stream-1")["status"], "SUCCEEDED")

    def test_stop_ends_the_job_and_its_actor(self):
        d = self.working_dir("wd2")
        env = json.dumps({"env_vars": {"JOB_EXAMPLE_RESOURCE": "worker_node"}})
        r = CLUSTER.raio("job", "submit", "--no-wait", "--submission-id", "hold-1",
                         "--working-dir", d, "--runtime-env-json", env, "--",
                         "./job_example hold")
        self.assertEqual(r.returncode, 0, r.stderr)

        def actor_pid():
            logs = CLUSTER.raio("job", "logs", "hold-1").stdout
            for line in logs.splitlines():
                if line.startswith("actor pid "):
                    return int(line.split()[2])
            return None

        pid = wait_for("the job's actor", actor_pid, timeout=60, interval=0.1)
        self.assertTrue(pid_runs(pid))
        r = CLUSTER.raio("job", "stop", "hold-1")
        self.assertEqual(r.returncode, 0, r.stderr)
        job = CLUSTER.job("hold-1")
        self.assertEqual(job["status"], "STOPPED", job)
        wait_for("the job's actor process to end", lambda: not pid_runs(pid), timeout=30)

    def test_symlinks_in_working_dir_are_packed_under_their_own_names(self):
        d = os.path.join(CLUSTER.tmp, "wd-links")
        os.makedirs(os.path.join(d, "sub"))
        with open(os.path.join(d, "a.txt"), "w") as f:
            f.write("data\n")
        os.symlink("a.txt", os.path.join(d, "zz.txt"))
        os.symlink("sub", os.path.join(d, "linkdir"))
        with open(os.path.join(d, "sub", "s.txt"), "w") as f:
            f.write("in sub\n")
        outside = os.path.join(CLUSTER.tmp, "outside.txt")
        with open(outside, "w") as f:
            f.write("from outside\n")
        os.symlink(outside, os.path.join(d, "x"))
        r = CLUSTER.raio("job", "submit", "--working-dir", d, "--",
                         "cat a.txt zz.txt linkdir/s.txt x; test ! -L a.txt && echo a-is-a-file")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("data\ndata\nin sub\nfrom outside\na-is-a-file\n", r.stdout)

    def test_log_tail_survives_utf8_split_across_chunks_and_bad_bytes(self):
        # 3-byte characters across 256 KiB chunks, then a byte that is not UTF-8.
        r = CLUSTER.raio("job", "submit", "--",
                         "python3 -c 'import sys; print(\"\u2588\"*300000); "
                         "sys.stdout.flush(); sys.stdout.buffer.write(b\"bad\\xff end\\n\")'")
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertNotIn("broke", r.stderr)
        self.assertIn("\u2588" * 300000, r.stdout)
        self.assertIn("bad\ufffd end", r.stdout)

    def start_job_with_a_child(self, cluster, job_id):
        """Submits a job whose shell starts `sleep 4441` in the background; returns the
        pids of that sleep, the guard (the shell's parent) and the supervisor (its parent).
        """
        pids = os.path.join(cluster.tmp, job_id + ".pids")
        r = cluster.raio("job", "submit", "--no-wait", "--submission-id", job_id, "--",
                         "sleep 4441 & echo $! $PPID > %s.tmp; mv %s.tmp %s; wait"
                         % (pids, pids, pids))
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for("the job's pids", lambda: os.path.exists(pids), timeout=60)
        child, guard = [int(x) for x in open(pids).read().split()]
        with open("/proc/%d/stat" % guard) as f:
            supervisor = int(f.read().rsplit(")", 1)[1].split()[1])
        return child, guard, supervisor

    def test_job_processes_end_when_the_supervisor_is_sigkilled(self):
        child, guard, supervisor = self.start_job_with_a_child(CLUSTER, "sup-kill-1")
        self.assertTrue(pid_runs(child))
        os.kill(supervisor, 9)
        wait_for("the job's background child to end", lambda: not pid_runs(child), timeout=30)
        wait_for("the guard to end", lambda: not pid_runs(guard), timeout=30)
        job = CLUSTER.wait_terminal("sup-kill-1")
        self.assertEqual(job["status"], "FAILED", job)

    def test_raio_stop_leaves_no_process_of_a_running_job(self):
        cluster = Cluster()
        try:
            child, guard, _ = self.start_job_with_a_child(cluster, "stop-all-1")
            self.assertTrue(pid_runs(child))
        finally:
            r = cluster.stop()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for("the job's background child to end", lambda: not pid_runs(child), timeout=30)
        self.assertFalse(pid_runs(guard))

    def test_list_delete_and_errors(self):
        r = CLUSTER.raio("job", "submit", "--submission-id", "quick-1", "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = CLUSTER.raio("job", "submit", "--submission-id", "fails-1", "--", "exit 3")
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAILED", r.stderr)
        r = CLUSTER.raio("job", "list")
        self.assertEqual(r.returncode, 0)
        self.assertIn("quick-1", r.stdout)
        self.assertIn("SUBMISSION_ID", r.stdout)
        listed = json.loads(CLUSTER.raio("job", "list", "--json").stdout)
        self.assertIn("fails-1", [j["submission_id"] for j in listed])
        self.assertEqual(CLUSTER.job("fails-1")["driver_exit_code"], 3)
        self.assertEqual(CLUSTER.raio("job", "delete", "quick-1").returncode, 0)
        r = CLUSTER.raio("job", "status", "quick-1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("quick-1", r.stderr)
        r = CLUSTER.raio("job", "submit", "--submission-id", "fails-1", "--", "true")
        self.assertEqual(r.returncode, 1)
        self.assertIn("409", r.stderr)
        r = CLUSTER.raio("job", "submit", "--runtime-env-json", '{"conda": "x"}', "--", "true")
        self.assertEqual(r.returncode, 1)
        self.assertIn("conda", r.stderr)
        # A working directory past the server's limit (50 MB here): the 413 reaches the CLI
        # while it uploads (it hung writing a body the server no longer read).
        big = os.path.join(CLUSTER.tmp, "big_wd")
        os.mkdir(big)
        with open(os.path.join(big, "blob"), "wb") as f:
            f.write(os.urandom(60 * 1000 * 1000))
        r = CLUSTER.raio("job", "submit", "--working-dir", big, "--", "true")
        shutil.rmtree(big)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("larger than the limit", r.stderr)
        self.assertIn("413", r.stderr)
        # Broke: another HTTP server's 404 printed as "HTTP 404: " with no reason.
        other = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1",
                                  "0"], cwd=CLUSTER.tmp, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        try:
            # Nothing read from it yet, so select() sees all there is: bounded, not a
            # readline() that blocks until ctest kills the test.
            ready, _, _ = select.select([other.stdout], [], [], scaled(30))
            self.assertTrue(ready, "http.server printed nothing within 30 s")
            line = other.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N ..."
            port = line.split(" port ")[1].split()[0]
            r = CLUSTER.raio("job", "list", "--address", "http://127.0.0.1:" + port)
        finally:
            other.kill()
            other.wait()
        self.assertEqual(r.returncode, 1)
        self.assertIn("HTTP 404 File not found", r.stderr)
        self.assertIn("is this the raio jobs API?", r.stderr)
        r = CLUSTER.raio("job", "status", "x", "--address", "http://127.0.0.1:1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot reach", r.stderr)


def main():
    global RAIO, EXAMPLE, CLUSTER
    RAIO, EXAMPLE, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    CLUSTER = Cluster()
    try:
        loader = unittest.TestLoader()
        if len(sys.argv) > 4:  # a name pattern, for running some tests by hand
            loader.testNamePatterns = ["*%s*" % sys.argv[4]]
        suite = loader.loadTestsFromTestCase(HttpTest if mode == "http" else CliTest)
        ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    finally:
        r = CLUSTER.stop()
        print(r.stdout, r.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
