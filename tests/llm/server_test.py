#!/usr/bin/env python3
"""Drives `raio llm serve` with real clients: curl (streaming included), python3-requests
and python3-aiohttp (64 concurrent streams), plus bad input and a client that leaves
mid-stream. Starts the server on port 0 in a temp dir and always stops it.

usage: server_test.py RAIO_LLM_BINARY MODEL_DIR [SERVE FLAGS...]
(the engine runs in a raio actor unless the flags say --in-process)

Every deadline and timeout the test sets is multiplied by RAIO_TEST_TIME_SCALE, else
RAIO_BUILD_TIME_SCALE (the one
test time scale, src/raio/testkit/time_scale.h; ctest sets the latter per build: larger under
sanitizers; default 1).
"""
import asyncio
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import aiohttp
import requests

BINARY, MODEL = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXTRA_FLAGS = sys.argv[3:]
KNOWN = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
         "in the park. One day, she saw a big, red ball. She wanted to play with it, but it "
         "was too high")
SERVER = None
BASE = None
TMP = None


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


def launch_server(flags):
    """Starts `raio-llm serve` on port 0 in a temp dir; returns (process, base URL, dir)."""
    tmp = tempfile.mkdtemp(prefix="raio-llm-server-test-")
    proc = subprocess.Popen(
        [BINARY, "serve", "--model", MODEL, "--port", "0"] + flags,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp)
    deadline = time.time() + scaled(60)
    # Reads the raw pipe, with select() for the deadline: a server that hangs before it
    # listens fails here instead of blocking a readline() until ctest kills the test. (A
    # readline() on the buffered stream would hide lines already read from select().)
    fd, pending = proc.stdout.fileno(), b""
    while True:
        while b"\n" not in pending:
            left = deadline - time.time()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                halt_server(proc, tmp)
                raise RuntimeError("server did not start within %.0f s" % scaled(60))
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("server exited before listening")
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        line = line.decode("utf-8", "replace")
        if "listening on" in line:
            return proc, "http://" + line.strip().rsplit(" ", 1)[1], tmp


def halt_server(proc, tmp):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=scaled(20))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc and proc.stdout:
        proc.stdout.close()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


def start_server():
    global SERVER, BASE, TMP
    SERVER, BASE, TMP = launch_server(["--max-num-seqs", "64", "--max-queued", "8"] + EXTRA_FLAGS)


def stop_server():
    halt_server(SERVER, TMP)


def engine_worker_pids(server_pid):
    """The server's child processes running raio-llm: the engine actor's worker."""
    pids = []
    for tid in os.listdir("/proc/%d/task" % server_pid):
        try:
            with open("/proc/%d/task/%s/children" % (server_pid, tid)) as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            pass  # a connection's thread that ended meanwhile
    out = []
    for pid in pids:
        try:
            if os.path.basename(os.readlink("/proc/%d/exe" % pid)).startswith("raio-llm"):
                out.append(pid)
        except OSError:
            pass
    return out


def metric(name, base=None):
    text = requests.get((base or BASE) + "/metrics", timeout=scaled(10)).text
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def wait_until(pred, timeout=20):
    """Polls `pred` until it holds (True) or scaled(timeout) passes (False); the timeout is
    scaled here, callers pass the unscaled bound."""
    deadline = time.time() + scaled(timeout)
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def sse_events(lines):
    out = []
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode()
        line = line.strip()
        if line.startswith("data: "):
            out.append(line[6:])
    return out


class ServerTest(unittest.TestCase):
    def test_health_and_models(self):
        self.assertEqual(requests.get(BASE + "/health", timeout=scaled(10)).status_code, 200)
        models = requests.get(BASE + "/v1/models", timeout=scaled(10)).json()
        self.assertEqual(models["object"], "list")
        self.assertEqual(models["data"][0]["id"], "stories260K")
        self.assertEqual(models["data"][0]["max_model_len"], 512)

    def test_greedy_completion_from_bos_gives_known_text(self):
        r = requests.post(BASE + "/v1/completions", timeout=scaled(60), json={
            "model": "stories260K", "prompt": [1], "max_tokens": 60, "temperature": 0})
        self.assertEqual(r.status_code, 200, r.text)
        body = r.json()
        self.assertEqual(body["object"], "text_completion")
        self.assertTrue(body["choices"][0]["text"].startswith(KNOWN), body)
        self.assertEqual(body["choices"][0]["finish_reason"], "length")
        self.assertEqual(body["usage"], {"prompt_tokens": 1, "completion_tokens": 60,
                                         "total_tokens": 61})

    def test_prompt_text_continues_with_a_space(self):
        r = requests.post(BASE + "/v1/completions", timeout=scaled(60), json={
            "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "stop": ["."]})
        text = r.json()["choices"][0]["text"]
        self.assertTrue(text.startswith(","), text)

    def test_curl_streams_completion_chunks_then_done(self):
        body = json.dumps({"prompt": [1], "max_tokens": 60, "temperature": 0, "stream": True,
                           "stream_options": {"include_usage": True}})
        out = subprocess.run(
            ["curl", "-sN", "-H", "Content-Type: application/json", "-d", body,
             BASE + "/v1/completions"], capture_output=True, text=True, timeout=scaled(60))
        events = sse_events(out.stdout.splitlines())
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertGreater(len(chunks), 10)
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        self.assertTrue(text.startswith(KNOWN), text)
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 60)
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")

    def test_chat_completion_and_chat_stream(self):
        msgs = [{"role": "user", "content": "Tell me a story."}]
        r = requests.post(BASE + "/v1/chat/completions", timeout=scaled(60), json={
            "messages": msgs, "max_tokens": 20, "temperature": 0})
        self.assertEqual(r.status_code, 200, r.text)
        body = r.json()
        self.assertEqual(body["object"], "chat.completion")
        self.assertEqual(body["choices"][0]["message"]["role"], "assistant")
        full = body["choices"][0]["message"]["content"]
        r = requests.post(BASE + "/v1/chat/completions", timeout=scaled(60), stream=True, json={
            "messages": msgs, "max_tokens": 20, "temperature": 0, "stream": True})
        self.assertTrue(r.headers["Content-Type"].startswith("text/event-stream"))
        events = sse_events(r.iter_lines())
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertEqual(chunks[0]["object"], "chat.completion.chunk")
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), full)

    def test_seeded_sampling_is_reproducible_over_http(self):
        req = {"prompt": "Tom", "max_tokens": 30, "temperature": 0.8, "seed": 7, "logprobs": 2}
        a = requests.post(BASE + "/v1/completions", json=req, timeout=scaled(60)).json()
        b = requests.post(BASE + "/v1/completions", json=req, timeout=scaled(60)).json()
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])
        lp = a["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), a["usage"]["completion_tokens"])

    def test_bad_input_gets_openai_errors_and_server_keeps_serving(self):
        cases = [
            (b"{not json", 400), ('{"prompt": "a", "model": "gpt-9"}'.encode(), 404),
            (json.dumps({"prompt": "a " * 600}).encode(), 400),
            (json.dumps({"prompt": "a", "max_tokens": 0}).encode(), 400),
            (json.dumps({"prompt": "a", "max_tokens": -3}).encode(), 400),
            (json.dumps({"prompt": "a " * (3 << 20)}).encode(), 413),  # over the 4 MiB bound
            (json.dumps({"prompt": "a", "temperature": -1}).encode(), 400),
            (json.dumps({"prompt": "a", "top_p": 0}).encode(), 400),
            (json.dumps({"prompt": "a", "top_p": 1.5}).encode(), 400),
            (b'{"prompt": "\xff\xfe"}', 400), (b"[1, 2]", 400),
            (json.dumps({"prompt": [1], "max_tokens": 600}).encode(), 400),
        ]
        for body, status in cases:
            r = requests.post(BASE + "/v1/completions", data=body, timeout=scaled(10),
                              headers={"Content-Type": "application/json"})
            self.assertEqual(r.status_code, status, (body[:40], r.text))
            err = r.json()
            self.assertEqual(err["object"], "error")
            self.assertEqual(err["code"], status)
            self.assertTrue(err["message"])
        self.assertEqual(requests.get(BASE + "/nope", timeout=scaled(10)).status_code, 404)
        self.assertEqual(requests.post(BASE + "/v1/completions", timeout=scaled(30), json={
            "prompt": "a", "max_tokens": 2}).status_code, 200)

    def test_body_over_the_limit_gets_413_while_the_client_still_sends_it(self):
        # Regression: the server closed with the body unread, so the connection was reset
        # and python-requests (which sends the whole body first) saw an error, not the 413.
        body = json.dumps({"prompt": "a " * (8 << 20)}).encode()
        for _ in range(3):
            r = requests.post(BASE + "/v1/completions", data=body, timeout=scaled(30),
                              headers={"Content-Type": "application/json"})
            self.assertEqual(r.status_code, 413)
            self.assertEqual(r.json()["code"], 413)

    def test_expect_100_continue_gets_the_interim_response(self):
        # Regression: curl sends `Expect: 100-continue` with bodies over 1 MiB and waited a
        # second for a 100 the server never sent.
        body = json.dumps({"prompt": [1], "max_tokens": 3, "temperature": 0}).encode()
        host, port = BASE.split("//")[1].split(":")
        with socket.create_connection((host, int(port)), timeout=scaled(5)) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n"))
            s.sendall(body)
            got = b""
            while b"usage" not in got:
                got += s.recv(4096)
            self.assertTrue(got.startswith(b"HTTP/1.1 200 OK\r\n"), got)

    def test_idle_kept_alive_connection_is_closed_after_the_timeout(self):
        # Regression: an idle connection held its server thread for as long as the client
        # kept it open.
        proc, base, tmp = launch_server(
            ["--keep-alive-timeout-s", str(scaled(0.5))] + EXTRA_FLAGS)
        try:
            host, port = base.split("//")[1].split(":")
            with socket.create_connection((host, int(port)), timeout=scaled(10)) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                got = b""
                while b"\r\n\r\n" not in got:
                    got += s.recv(4096)
                self.assertTrue(got.startswith(b"HTTP/1.1 200"), got)
                # Closed by the server: recv returns b"" (a hang ends in socket.timeout).
                self.assertEqual(s.recv(4096), b"")
        finally:
            halt_server(proc, tmp)

    def test_client_disconnect_mid_stream_aborts_the_request(self):
        body = json.dumps({"prompt": [1], "max_tokens": 400, "temperature": 0,
                           "ignore_eos": True, "stream": True}).encode()
        s = socket.create_connection((BASE.split("//")[1].split(":")[0],
                                      int(BASE.rsplit(":", 1)[1])))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 3:
            got += s.recv(4096)
        s.close()
        self.assertTrue(wait_until(lambda: metric("vllm:num_requests_running") == 0))
        self.assertTrue(wait_until(lambda: metric("vllm:kv_cache_usage_perc") == 0))
        self.assertEqual(requests.get(BASE + "/health", timeout=scaled(10)).status_code, 200)

    def test_64_concurrent_streams_with_aiohttp_and_queue_bound(self):
        async def one(session, i, base):
            req = {"prompt": [1], "max_tokens": base + i % 30, "temperature": 0, "stream": True,
                   "ignore_eos": True}
            async with session.post(BASE + "/v1/completions", json=req) as resp:
                if resp.status != 200:
                    return resp.status, resp.headers.get("Retry-After"), ""
                text = ""
                async for line in resp.content:
                    line = line.decode().strip()
                    if line.startswith("data: ") and line != "data: [DONE]":
                        text += json.loads(line[6:])["choices"][0]["text"]
                return 200, None, text

        async def run(n, base):
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                             timeout=aiohttp.ClientTimeout(total=scaled(120))) as s:
                return await asyncio.gather(*[one(s, i, base) for i in range(n)])

        results = asyncio.run(run(64, 20))
        greedy = requests.post(BASE + "/v1/completions", timeout=scaled(60), json={
            "prompt": [1], "max_tokens": 49, "temperature": 0, "ignore_eos": True}).json()
        full = greedy["choices"][0]["text"]
        for i, (status, _, text) in enumerate(results):
            self.assertEqual(status, 200)
            self.assertTrue(full.startswith(text), (i, text))  # greedy: prefixes of one text
        # 64 running + 8 queued is the bound: 120 long ones at once overflow with 503 +
        # Retry-After.
        results = asyncio.run(run(120, 150))
        busy = [r for r in results if r[0] == 503]
        self.assertTrue(busy)
        self.assertEqual(busy[0][1], "1")
        self.assertTrue(all(r[0] in (200, 503) for r in results))
        self.assertEqual(requests.get(BASE + "/health", timeout=scaled(10)).status_code, 200)

    @unittest.skipIf("--in-process" in EXTRA_FLAGS, "the engine runs in the server process")
    def test_killed_engine_worker_is_restarted_and_serves_again(self):
        pids = engine_worker_pids(SERVER.pid)
        self.assertTrue(pids)

        async def stream(session, streaming):
            req = {"prompt": [1], "max_tokens": 450, "stream": True, "ignore_eos": True}
            async with session.post(BASE + "/v1/completions", json=req) as resp:
                if resp.status != 200:  # not yet submitted when the worker died
                    self.assertEqual(resp.status, 500)
                    self.assertEqual((await resp.json())["object"], "error")
                    return None
                lines = []
                async for line in resp.content:
                    lines.append(line)
                    if line.startswith(b"data: "):
                        streaming.set()  # this stream is in flight
                return sse_events(lines)

        async def kill_while_streaming():
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                             timeout=aiohttp.ClientTimeout(total=scaled(60))) as s:
                streaming = asyncio.Event()
                tasks = [asyncio.create_task(stream(s, streaming)) for _ in range(32)]
                # The kill lands while streams are in flight: once the first has its first
                # event (450 tokens each: none is near its end by then).
                await asyncio.wait_for(streaming.wait(), timeout=scaled(60))
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                return await asyncio.gather(*tasks)

        # Streams in flight end (no hang) with an error event as OpenAI's clients detect it
        # (an `error` member, as vLLM sends), then [DONE].
        errors = 0
        for events in asyncio.run(kill_while_streaming()):
            if events is None:
                continue
            self.assertEqual(events[-1], "[DONE]")
            last = json.loads(events[-2])
            if "error" in last:
                errors += 1
                self.assertEqual(last["error"]["object"], "error")
                self.assertEqual(last["error"]["code"], 500)
        self.assertGreater(errors, 0)

        def serves_known_text():
            try:
                r = requests.post(BASE + "/v1/completions", timeout=scaled(30), json={
                    "prompt": [1], "max_tokens": 60, "temperature": 0})
            except requests.RequestException:
                return False
            if r.status_code != 200:
                self.assertEqual(r.json()["object"], "error")  # an OpenAI error meanwhile
                return False
            return r.json()["choices"][0]["text"].startswith(KNOWN)

        self.assertTrue(wait_until(serves_known_text, timeout=60))
        self.assertEqual(requests.get(BASE + "/health", timeout=scaled(10)).status_code, 200)
        self.assertFalse(set(engine_worker_pids(SERVER.pid)) & set(pids))

    @unittest.skipIf("--in-process" in EXTRA_FLAGS, "the engine runs in the server process")
    def test_health_is_503_once_the_engine_is_gone_for_good(self):
        proc, base, tmp = launch_server(["--engine-max-restarts", "0"] + EXTRA_FLAGS)
        try:
            self.assertEqual(requests.get(base + "/health", timeout=scaled(10)).status_code, 200)
            for pid in engine_worker_pids(proc.pid):
                os.kill(pid, signal.SIGKILL)
            self.assertTrue(wait_until(
                lambda: requests.get(base + "/health", timeout=scaled(10)).status_code == 503))
            err = requests.get(base + "/health", timeout=scaled(10)).json()
            self.assertEqual((err["object"], err["code"]), ("error", 503))
            self.assertIn("died", err["message"])
            r = requests.post(base + "/v1/completions", timeout=scaled(30), json={"prompt": "a"})
            self.assertEqual(r.status_code, 500)
            self.assertEqual(r.json()["object"], "error")
        finally:
            halt_server(proc, tmp)

    def test_metrics_use_vllm_names(self):
        requests.post(BASE + "/v1/completions", json={"prompt": "a", "max_tokens": 3},
                      timeout=scaled(30))
        text = requests.get(BASE + "/metrics", timeout=scaled(10)).text
        for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket",
                     "vllm:time_per_output_token_seconds_count",
                     "vllm:e2e_request_latency_seconds_sum", "vllm:prompt_tokens_total",
                     "vllm:generation_tokens_total"]:
            self.assertIn(name + "{model_name=\"stories260K\"", text)
        self.assertGreater(metric("vllm:generation_tokens_total"), 0)
        # The same prompt twice: the second finds its first full block in the prefix cache.
        for _ in range(2):
            requests.post(BASE + "/v1/completions", timeout=scaled(30), json={
                "prompt": "Once upon a time there was a big red dog who liked to run", "max_tokens": 2})
        self.assertGreater(metric("vllm:prefix_cache_hits_total"), 0)


if __name__ == "__main__":
    try:
        start_server()
        prog = unittest.main(argv=[sys.argv[0]], exit=False, verbosity=2)
        ok = prog.result.wasSuccessful()
    finally:
        stop_server()
    sys.exit(0 if ok else 1)
