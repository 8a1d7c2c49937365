#!/usr/bin/env python3
"""The jobs API with Redis storage against real `raio start` heads and a real redis-server.

Usage: jobs_redis_test.py RAIO_CLI REDIS_SERVER

A redis-server on a Unix socket in a private TMPDIR (no TCP port, no persistence). Then:
  - a head whose Redis cannot be reached does not start, and says which address;
  - jobs of a head (one that finished, one still running) are listed with their statuses
    and logs by a new head on the same Redis after the first is stopped; the running one
    FAILED, "the head restarted";
  - Redis killed while the head runs: the job routes answer 503 naming the Redis; Redis
    back: they answer again, and new jobs run.
Waits poll with a deadline scaled by RAIO_TEST_TIME_SCALE / RAIO_BUILD_TIME_SCALE (the
helpers of jobs_test.py); nothing sleeps to synchronise.
"""
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jobs_test import JobsApi, scaled, wait_for  # noqa: E402

RAIO = REDIS_SERVER = None
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class Redis:
    """A redis-server on TMP/redis.sock, restartable on the same socket."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.sock = os.path.join(tmp, "redis.sock")
        self.address = "unix://" + self.sock
        self.proc = None

    def start(self):
        log = open(os.path.join(self.tmp, "redis.log"), "ab")
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", "0", "--unixsocket", self.sock, "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", self.tmp],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for("redis-server to answer PING", self.ping, timeout=20)

    def ping(self):
        assert self.proc.poll() is None, "redis-server exited; see redis.log"
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(scaled(5))
                s.connect(self.sock)
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Head(JobsApi):
    """`raio start --head` with the jobs API on a free port and its records in Redis."""

    def __init__(self, tmp, redis_address, check=True, namespace="jobs-redis-test"):
        self.tmp = tmp
        self.env = dict(os.environ, TMPDIR=tmp,
                        RAIO_JOBS_REQUEST_TIMEOUT_MS=str(int(scaled(3000))))
        for name in ("RAIO_ADDRESS", "RAIO_API_SERVER_ADDRESS", "RAIO_NODE_ID",
                     "RAIO_REDIS_ADDRESS", "RAIO_REDIS_PASSWORD",
                     "RAIO_EXTERNAL_STORAGE_NAMESPACE"):
            self.env.pop(name, None)
        self.started = self.raio("start", "--head", "--port", "0", "--dashboard-port", "0",
                                 "--num-cpus", "2", "--redis-address", redis_address,
                                 "--external-storage-namespace", namespace)
        if check and self.started.returncode != 0:
            raise AssertionError("raio start failed: %s%s" % (self.started.stdout,
                                                            self.started.stderr))
        self.api = None
        if self.started.returncode == 0:
            record = json.load(open(os.path.join(tmp, "raio", "current_cluster")))
            self.api = record["dashboard_address"]

    def raio(self, *args, timeout=120):
        return subprocess.run([RAIO] + list(args), env=self.env, capture_output=True,
                              encoding="utf-8", errors="replace", timeout=scaled(timeout))

    def wait_status(self, job_id, statuses, timeout=60):
        return wait_for("job %s to be %s" % (job_id, "/".join(statuses)),
                        lambda: (lambda j: j if j["status"] in statuses else None)(
                            self.job(job_id)), timeout)

    def stop(self):
        return self.raio("stop")


class RedisStorageTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="raio-jobs-redis-")
        self.redis = Redis(self.tmp)
        self.redis.start()
        self.heads = []

    def tearDown(self):
        for head in self.heads:
            head.stop()
        self.redis.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def head(self, **kwargs):
        h = Head(self.tmp, self.redis.address, **kwargs)
        self.heads.append(h)
        return h

    def test_unreachable_redis_stops_the_head_from_starting(self):
        nowhere = "unix://" + os.path.join(self.tmp, "nobody.sock")
        h = Head(self.tmp, nowhere, check=False)
        self.assertNotEqual(h.started.returncode, 0, h.started.stdout)
        self.assertIn(nowhere, h.started.stderr)
        self.assertIn("cannot be reached", h.started.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "raio", "current_cluster")))
        r = h.raio("start", "--address", "127.0.0.1:1", "--redis-address", nowhere)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("head's", r.stderr)

    def test_jobs_survive_a_head_restart(self):
        first = self.head()
        status, j = first.http("POST", "/api/jobs/", {
            "entrypoint": "echo hello-from-the-first-head; echo to-stderr >&2",
            "submission_id": "before-1", "metadata": {"owner": "test"}})
        self.assertEqual(status, 200, j)
        status, j = first.http("POST", "/api/jobs/", {
            "entrypoint": "echo started; exec sleep 100000", "submission_id": "running-1"})
        self.assertEqual(status, 200, j)
        done = first.wait_status("before-1", TERMINAL)
        self.assertEqual(done["status"], "SUCCEEDED", done)
        first.wait_status("running-1", ("RUNNING",))
        wait_for("running-1's first line in its log copy",
                 lambda: "started" in first.http("GET", "/api/jobs/running-1/logs")[1]["logs"])
        r = first.stop()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.heads.remove(first)

        second = self.head()
        self.assertNotEqual(second.api, None)
        status, jobs = second.http("GET", "/api/jobs/")
        self.assertEqual(status, 200, jobs)
        by_id = {j["submission_id"]: j for j in jobs}
        self.assertEqual(by_id["before-1"]["status"], "SUCCEEDED")
        self.assertEqual(by_id["before-1"]["driver_exit_code"], 0)
        self.assertEqual(by_id["before-1"]["metadata"], {"owner": "test"})
        self.assertEqual(by_id["running-1"]["status"], "FAILED")
        self.assertIn("the head restarted while the job was RUNNING",
                      by_id["running-1"]["message"])
        status, logs = second.http("GET", "/api/jobs/before-1/logs")
        self.assertEqual(status, 200)
        self.assertIn("hello-from-the-first-head\n", logs["logs"])
        self.assertIn("to-stderr\n", logs["logs"])
        self.assertIn("started\n", second.http("GET", "/api/jobs/running-1/logs")[1]["logs"])
        # The same through the command line.
        r = second.raio("job", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("before-1", r.stdout)
        self.assertIn("running-1", r.stdout)
        r = second.raio("job", "logs", "before-1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("hello-from-the-first-head", r.stdout)
        r = second.raio("job", "status", "running-1")
        self.assertIn("FAILED", r.stdout + r.stderr)
        # The new head runs new jobs, and can delete old ones.
        status, j = second.http("POST", "/api/jobs/", {"entrypoint": "echo after",
                                                       "submission_id": "after-1"})
        self.assertEqual(status, 200, j)
        self.assertEqual(second.wait_status("after-1", TERMINAL)["status"], "SUCCEEDED")
        self.assertEqual(second.http("DELETE", "/api/jobs/before-1")[0], 200)
        self.assertEqual(second.http("GET", "/api/jobs/before-1")[0], 404)

    def test_one_head_per_namespace(self):
        first = self.head()
        status, j = first.http("POST", "/api/jobs/", {"entrypoint": "echo mine",
                                                      "submission_id": "first-1"})
        self.assertEqual(status, 200, j)
        # A second head (another session directory) on the same namespace is refused,
        # naming the head that holds it, after waiting out one lease.
        other_tmp = os.path.join(self.tmp, "second")
        os.mkdir(other_tmp)
        second = Head(other_tmp, self.redis.address, check=False)
        if second.started.returncode == 0:
            second.stop()
        self.assertNotEqual(second.started.returncode, 0, second.started.stdout)
        self.assertIn("the namespace 'jobs-redis-test' of the Redis at %s is in use by another "
                      "head" % self.redis.address, second.started.stderr)
        self.assertIn(" pid ", second.started.stderr)
        self.assertIn("--external-storage-namespace", second.started.stderr)
        self.assertFalse(os.path.exists(os.path.join(other_tmp, "raio", "current_cluster")))
        # The first head goes on undisturbed.
        self.assertEqual(first.wait_status("first-1", TERMINAL)["status"], "SUCCEEDED")
        # Another namespace on the same Redis is another cluster's: free, and empty.
        third = Head(other_tmp, self.redis.address, namespace="another-cluster")
        self.heads.append(third)
        status, jobs = third.http("GET", "/api/jobs/")
        self.assertEqual((status, jobs), (200, []))

    def test_lost_redis_answers_503_naming_it_then_recovers(self):
        h = self.head()
        status, j = h.http("POST", "/api/jobs/", {"entrypoint": "echo one",
                                                  "submission_id": "one"})
        self.assertEqual(status, 200, j)
        self.assertEqual(h.wait_status("one", TERMINAL)["status"], "SUCCEEDED")
        status, j = h.http("POST", "/api/jobs/", {"entrypoint": "echo up; exec sleep 100000",
                                                  "submission_id": "long"})
        self.assertEqual(status, 200, j)
        h.wait_status("long", ("RUNNING",))
        follower = subprocess.Popen([RAIO, "job", "logs", "--follow", "long"], env=h.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # It prints the log's first line once its tail is open.
        ready, _, _ = select.select([follower.stdout], [], [], scaled(30))
        self.assertTrue(ready, "the follower printed nothing")
        self.assertEqual(follower.stdout.readline(), "up\n")
        self.redis.kill()
        # The follower does not take the cut stream for the job's end.
        out, err = follower.communicate(timeout=scaled(60))
        self.assertEqual(follower.returncode, 1, out + err)
        # The reason follows (a WebSocket close reason is cut at 123 bytes).
        self.assertIn("ended before the job did: the jobs storage, Redis at unix://", err)
        for method, path, body in (("GET", "/api/jobs/", None), ("GET", "/api/jobs/one", None),
                                   ("GET", "/api/jobs/one/logs", None),
                                   ("POST", "/api/jobs/", {"entrypoint": "true"}),
                                   ("DELETE", "/api/jobs/one", None)):
            status, j = h.http(method, path, body)
            self.assertEqual(status, 503, (method, path, j))
            self.assertIn(self.redis.address, j["error"])
        r = h.raio("job", "list")
        self.assertEqual(r.returncode, 1)
        self.assertIn(self.redis.address, r.stderr)
        self.assertEqual(h.http("GET", "/api/version")[0], 200)  # the server itself lives

        self.redis.start()  # empty: this test's Redis keeps nothing on disk
        status, jobs = h.http("GET", "/api/jobs/")
        self.assertEqual(status, 200, jobs)
        self.assertEqual([j["submission_id"] for j in jobs], ["one", "long"])
        status, j = h.http("POST", "/api/jobs/", {"entrypoint": "echo two",
                                                  "submission_id": "two"})
        self.assertEqual(status, 200, j)
        self.assertEqual(h.wait_status("two", TERMINAL)["status"], "SUCCEEDED")
        self.assertIn("two\n", h.http("GET", "/api/jobs/two/logs")[1]["logs"])
        # The records the new Redis lacked were written to it again when the jobs server
        # reconnected, so a head restart from here still finds them.
        h.stop()
        self.heads.remove(h)
        again = self.head()
        status, jobs = again.http("GET", "/api/jobs/")
        self.assertEqual(status, 200, jobs)
        self.assertEqual(sorted(j["submission_id"] for j in jobs), ["long", "one", "two"])


def main():
    global RAIO, REDIS_SERVER
    RAIO, REDIS_SERVER = sys.argv[1], sys.argv[2]
    loader = unittest.TestLoader()
    if len(sys.argv) > 3:  # a name pattern, for running some tests by hand
        loader.testNamePatterns = ["*%s*" % sys.argv[3]]
    suite = loader.loadTestsFromTestCase(RedisStorageTest)
    ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
