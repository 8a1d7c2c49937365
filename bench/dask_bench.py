#!/usr/bin/python3
"""dask_bench: the workloads of raio_bench that Dask distributed has an equivalent for.

    /usr/bin/python3 bench/dask_bench.py [--quick] [--out PATH] [--startup-runs N]

Runs on a distributed.LocalCluster with one single-threaded worker process per CPU
(os.cpu_count(), as raio's embedded cluster), no dashboard. Writes JSON to PATH, or to
stdout without --out; progress goes to stderr. Used by `make bench-peers`
(bench/peers.sh), which compares it with raio_bench in bench/compare_peers.py.

Differences from raio_bench, deliberate and recorded in each row's detail:
  - async batches are 2,000 tasks / calls (raio: 10,000): Dask's scheduler does about
    1-3k tasks/s, so 10,000 would take most of the time budget; the figure is a rate;
  - small put/get is scatter(hash=False) + Future.result() of a Python int;
  - Put/Get of a numpy uint8 array: scatter (driver -> worker over TCP) and result
    (worker -> driver); 1 MiB and 100 MiB only (1 GiB is skipped: slow and memory-heavy);
  - start to first result: in this process, LocalCluster + Client + one task + result
    (the `import distributed` time is recorded separately; raio's figure is a fresh
    process from before Init).
The process makes itself a process-group leader so that bench/peers.sh can kill any
leftover Dask process by group id; it also kills its own children on the way out.
"""
import argparse
import json
import logging
import os
import signal
import statistics
import sys
import time

T_IMPORT0 = time.perf_counter()
import numpy as np  # noqa: E402
import distributed  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

IMPORT_S = time.perf_counter() - T_IMPORT0

MiB = 1 << 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def percentile(v, p):
    """Nearest-rank percentile, as raio_bench."""
    if not v:
        return None
    s = sorted(v)
    rank = max(1, min(len(s), int(-(-p * len(s) // 100))))
    return s[rank - 1]


def median(v):
    return percentile(v, 50)


def noop():
    return None


def worker_pid():
    return os.getpid()


class Target:
    """Actor: noop bumps a counter, so that calls() proves every call ran once."""

    def __init__(self):
        self.n = 0

    def noop(self):
        self.n += 1

    def calls(self):
        return self.n

    def pid(self):
        return os.getpid()


def row(name, value, unit, **detail):
    return {"benchmark": name, "result": value, "unit": unit, "detail": detail}


def start_cluster(n_workers):
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(cluster)
    return cluster, client


def close_cluster(cluster, client):
    try:
        client.close()
    finally:
        cluster.close()


def bench_startup(n_workers, runs):
    start_ms, down_ms = [], []
    for i in range(runs):
        log(f"  startup run {i + 1}/{runs} ...")
        t0 = time.perf_counter()
        cluster, client = start_cluster(n_workers)
        try:
            client.submit(noop, pure=False).result()
            t1 = time.perf_counter()
        finally:
            close_cluster(cluster, client)
        t2 = time.perf_counter()
        start_ms.append((t1 - t0) * 1e3)
        down_ms.append((t2 - t1) * 1e3)
    d = dict(runs=runs, start_to_first_result_ms_each=start_ms, shutdown_ms_each=down_ms,
             import_distributed_s=IMPORT_S,
             note="in-process: LocalCluster + Client + one task + result; import not included")
    return [row("start to first result (median)", median(start_ms), "ms", **d),
            row("shutdown (median)", median(down_ms), "ms", **d)]


def timed_loop(fn, warmup, max_samples, budget_s):
    for _ in range(warmup):
        fn()
    us = []
    start = time.perf_counter()
    last = start
    while len(us) < max_samples and last - start < budget_s:
        t0 = time.perf_counter()
        fn()
        last = time.perf_counter()
        us.append((last - t0) * 1e6)
    return us, last - start


def bench_sync(client, q):
    us, total = timed_loop(lambda: client.submit(noop, pure=False).result(),
                           50 if q else 200, 100000, 1.0 if q else 3.0)
    d = dict(samples=len(us), min_us=percentile(us, 0), max_us=percentile(us, 100),
             total_s=total)
    return [row("sync no-op round trip (median)", median(us), "us", **d),
            row("sync no-op round trip (p99)", percentile(us, 99), "us", **d),
            row("sync no-op throughput", len(us) / total, "tasks/s", **d)]


def rounds_of(batch_fn, batch, rounds, budget_s):
    batch_fn(min(batch, 500))  # warm-up
    rates = []
    begin = time.perf_counter()
    for r in range(rounds):
        if r > 0 and time.perf_counter() - begin > budget_s:
            break
        t0 = time.perf_counter()
        batch_fn(batch)
        rates.append(batch / (time.perf_counter() - t0))
    return rates


def bench_async(client, q, batch):
    def run(n):
        futs = [client.submit(noop, pure=False) for _ in range(n)]
        client.gather(futs)
        del futs

    rates = rounds_of(run, batch, 3, 4 if q else 8)
    d = dict(batch=batch, rounds=len(rates), tasks_per_s_each_round=rates,
             note=f"batch of {batch} (raio: 10,000): submit each, then gather")
    return [row("async no-op batch (best)", max(rates), "tasks/s", **d),
            row("async no-op batch (median)", median(rates), "tasks/s", **d)]


def bench_putget(client, q):
    counter = [0]
    wrong = [0]

    def one():
        i = counter[0]
        counter[0] += 1
        f = client.scatter(i, hash=False)
        if f.result() != i:
            wrong[0] += 1
        f.release()

    us, total = timed_loop(one, 50 if q else 200, 50000, 1.0 if q else 3.0)
    d = dict(samples=len(us), wrong_values=wrong[0], p99_us=percentile(us, 99), total_s=total,
             note="scatter(int, hash=False) + Future.result()")
    return [row("put+get small int", len(us) / total, "calls/s", **d),
            row("put+get small int (median)", median(us), "us", **d)]


def make_actor(client):
    a = client.submit(Target, actor=True, pure=False).result()
    if a.pid().result() == os.getpid():
        raise RuntimeError("the actor runs in the driver process")
    return a


def bench_actor_sync(client, q):
    a = make_actor(client)
    warmup = 50 if q else 200
    us, total = timed_loop(lambda: a.noop().result(), warmup, 100000, 1.0 if q else 3.0)
    got = a.calls().result()
    if got != warmup + len(us):
        raise RuntimeError(f"actor ran {got} calls, expected {warmup + len(us)}")
    d = dict(samples=len(us), max_us=percentile(us, 100), total_s=total, calls_checked=got)
    return [row("actor 1:1 sync call (median)", median(us), "us", **d),
            row("actor 1:1 sync call (p99)", percentile(us, 99), "us", **d),
            row("actor 1:1 sync calls", len(us) / total, "calls/s", **d)]


def bench_actor_async(client, q, batch):
    a = make_actor(client)
    done = [0]

    def run(n):
        futs = [a.noop() for _ in range(n)]
        for f in futs:
            f.result()
        done[0] += n

    rates = rounds_of(run, batch, 3, 4 if q else 8)
    got = a.calls().result()
    if got != done[0]:
        raise RuntimeError(f"actor ran {got} calls, expected {done[0]}")
    d = dict(batch=batch, rounds=len(rates), calls_per_s_each_round=rates, calls_checked=got,
             note=f"batch of {batch} (raio: 10,000): call each, then result() each")
    return [row("actor 1:1 async batch (best)", max(rates), "calls/s", **d),
            row("actor 1:1 async batch (median)", median(rates), "calls/s", **d)]


def payload(n):
    a = np.zeros(n, dtype=np.uint8)
    idx = np.linspace(0, n - 1, 17).astype(np.int64)
    a[idx] = (np.arange(17) * 7 + 1).astype(np.uint8)
    return a, idx


def bench_objects(client, q):
    rows = []
    for n, name, reps in ((MiB, "1 MiB", 10 if q else 20), (100 * MiB, "100 MiB", 3 if q else 5)):
        arr, idx = payload(n)
        want = arr[idx].copy()
        # Warm-up (connections, serialization paths).
        client.scatter(arr, hash=False).release()
        put_us, get_us = [], []
        fut = None
        for _ in range(reps):
            if fut is not None:
                fut.release()
                time.sleep(0.05)
            t0 = time.perf_counter()
            fut = client.scatter(arr, hash=False)
            put_us.append((time.perf_counter() - t0) * 1e6)
        for _ in range(reps):
            t0 = time.perf_counter()
            got = fut.result()
            get_us.append((time.perf_counter() - t0) * 1e6)
            if got.size != n or not np.array_equal(got[idx], want):
                raise RuntimeError(f"Get {name}: wrong data")
            del got
        fut.release()
        del arr

        def gbps(us):
            return n / (us / 1e6) / 1e9

        rows.append(row(f"Put {name} (median)", gbps(median(put_us)), "GB/s", bytes=n,
                        reps=reps, us_each=put_us, note="client.scatter(numpy uint8, hash=False)"))
        rows.append(row(f"Get {name} (median)", gbps(median(get_us)), "GB/s", bytes=n,
                        reps=reps, us_each=get_us, note="Future.result() of the scattered array"))
    return rows


def kill_children():
    try:
        import psutil
        kids = psutil.Process().children(recursive=True)
        for k in kids:
            try:
                k.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(kids, timeout=5)
        return len(kids)
    except Exception:  # noqa: BLE001
        return -1


class Timeout(Exception):
    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", help="write JSON here (default: stdout)")
    ap.add_argument("--startup-runs", type=int, default=None)
    ap.add_argument("--batch", type=int, default=2000, help="async batch size (default 2000)")
    ap.add_argument("--time-limit", type=int, default=150, help="seconds before giving up")
    opt = ap.parse_args()
    q = opt.quick
    startup_runs = opt.startup_runs or (2 if q else 3)
    n_workers = os.cpu_count() or 1

    try:
        os.setpgrp()  # leftovers can be killed by group id (bench/peers.sh)
    except OSError:
        pass

    def on_alarm(signum, frame):
        raise Timeout(f"time limit of {opt.time_limit} s reached")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(143)))
    signal.alarm(opt.time_limit)

    log(f"dask_bench: distributed {distributed.__version__}, LocalCluster "
        f"{n_workers} worker processes x 1 thread{', --quick' if q else ''}")
    load_before = os.getloadavg()[0]
    t_start = time.perf_counter()
    rows, errors = [], []
    cluster = client = None
    try:
        rows += bench_startup(n_workers, startup_runs)
        cluster, client = start_cluster(n_workers)
        pids = set(client.run(os.getpid).values())
        if os.getpid() in pids or len(pids) != n_workers:
            raise RuntimeError(f"unexpected worker pids {pids}")
        if client.submit(worker_pid, pure=False).result() not in pids:
            raise RuntimeError("a task did not run in a worker process")
        for name, fn in (("sync no-op tasks", lambda: bench_sync(client, q)),
                         ("async no-op tasks", lambda: bench_async(client, q, opt.batch)),
                         ("put/get small int", lambda: bench_putget(client, q)),
                         ("actor 1:1 sync calls", lambda: bench_actor_sync(client, q)),
                         ("actor 1:1 async calls", lambda: bench_actor_async(client, q, opt.batch)),
                         ("Put/Get 1 MiB, 100 MiB", lambda: bench_objects(client, q))):
            log(f"  {name} ...")
            t0 = time.perf_counter()
            try:
                rows += fn()
            except Timeout:
                raise
            except Exception as e:  # noqa: BLE001
                log(f"dask_bench: {name} failed: {e!r}")
                errors.append(f"{name}: {e!r}")
            log(f"    ({time.perf_counter() - t0:.1f} s)")
    except Timeout as e:
        log(f"dask_bench: {e}")
        errors.append(str(e))
    finally:
        signal.alarm(0)
        if cluster is not None:
            try:
                close_cluster(cluster, client)
            except Exception as e:  # noqa: BLE001
                log(f"dask_bench: close failed: {e!r}")
        killed = kill_children()
        if killed:
            log(f"dask_bench: killed {killed} leftover child processes")

    out = {
        "timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "framework": "dask.distributed",
        "version": distributed.__version__,
        "python": sys.version.split()[0],
        "cluster": f"LocalCluster(n_workers={n_workers}, threads_per_worker=1, processes=True)",
        "quick": q,
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
        "total_run_s": time.perf_counter() - t_start,
        "errors": errors,
        "results": rows,
    }
    text = json.dumps(out, indent=2)
    if opt.out:
        with open(opt.out, "w") as f:
            f.write(text + "\n")
        log(f"dask_bench: results written to {opt.out}")
    else:
        print(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
