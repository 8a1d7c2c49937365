#!/usr/bin/python3
"""compare_peers: raio_bench and dask_bench side by side (`make bench-peers`).

    /usr/bin/python3 bench/compare_peers.py RAIO_JSON DASK_JSON [OUT_JSON]

Prints workload, raio, dask, unit and ratio, where ratio > 1 means raio is better:
raio/dask for rates (tasks/s, calls/s, GB/s), dask/raio for latencies (us, ms). Writes
both inputs and the table to OUT_JSON (default bench/results/peers-<UTC timestamp>.json).
"""
import json
import os
import sys
import time

# (workload, raio_bench row, dask_bench row). Units come from the rows; they must agree.
PAIRS = [
    ("sync no-op round trip (median)", "sync no-op round trip (median)", None),
    ("sync no-op round trip (p99)", "sync no-op round trip (p99)", None),
    ("sync no-op throughput", "sync no-op throughput", None),
    ("async no-op batch (best)", "async no-op, 10k batch (best)", "async no-op batch (best)"),
    ("async no-op batch (median)", "async no-op, 10k batch (median)",
     "async no-op batch (median)"),
    ("put+get small int", "put+get small int", None),
    ("put+get small int (median)", "put+get small int (median)", None),
    ("actor 1:1 sync call (median)", "actor 1:1 sync call (median)", None),
    ("actor 1:1 sync call (p99)", "actor 1:1 sync call (p99)", None),
    ("actor 1:1 sync calls", "actor 1:1 sync calls", None),
    ("actor 1:1 async batch (best)", "actor 1:1 async, 10k calls (best)",
     "actor 1:1 async batch (best)"),
    ("actor 1:1 async batch (median)", "actor 1:1 async, 10k calls (median)",
     "actor 1:1 async batch (median)"),
    ("Put 1 MiB (median)", "Put 1 MiB vector<uint8_t> (median)", "Put 1 MiB (median)"),
    ("Get 1 MiB (median)", "Get 1 MiB typed copy (median)", "Get 1 MiB (median)"),
    ("Put 100 MiB (median)", "Put 100 MiB vector<uint8_t> (median)", "Put 100 MiB (median)"),
    ("Get 100 MiB (median)", "Get 100 MiB typed copy (median)", "Get 100 MiB (median)"),
    ("start to first result (median)", "start to first result (median)", None),
    ("shutdown (median)", "shutdown (median)", None),
]
LOWER_IS_BETTER = {"us", "ms", "s"}


def by_name(doc):
    return {r["benchmark"]: r for r in doc.get("results", [])}


def fmt(v):
    if v is None:
        return "n/a"
    if v >= 1000:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    raio_doc = json.load(open(argv[1]))
    dask_doc = json.load(open(argv[2]))
    out_path = argv[3] if len(argv) == 4 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results",
        "peers-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ".json")
    raio, dask = by_name(raio_doc), by_name(dask_doc)

    table = []
    for workload, raio_name, dask_name in PAIRS:
        r, d = raio.get(raio_name), dask.get(dask_name or raio_name)
        unit = (r or d or {}).get("unit", "?")
        if r and d and r["unit"] != d["unit"]:
            raise SystemExit(f"unit mismatch for {workload}: {r['unit']} vs {d['unit']}")
        rv = r["result"] if r else None
        dv = d["result"] if d else None
        ratio = None
        if rv and dv:
            ratio = dv / rv if unit in LOWER_IS_BETTER else rv / dv
        table.append({"workload": workload, "raio": rv, "dask": dv, "unit": unit,
                      "ratio": ratio, "raio_row": raio_name, "dask_row": dask_name or raio_name,
                      "dask_note": (d or {}).get("detail", {}).get("note")})

    w = max(len("workload"), *(len(t["workload"]) for t in table))
    line = "{:<%d}  {:>12}  {:>12}  {:<8}  {:>9}" % w
    print()
    print(f"raio ({raio_doc.get('git_commit', '?')}, {raio_doc.get('cluster', '?')}) vs "
          f"Dask distributed {dask_doc.get('version', '?')} ({dask_doc.get('cluster', '?')})")
    print("ratio > 1: raio better (raio/dask for rates, dask/raio for latencies)")
    print()
    print(line.format("workload", "raio", "dask", "unit", "ratio"))
    print(line.format("-" * w, "-" * 12, "-" * 12, "-" * 8, "-" * 9))
    for t in table:
        ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.1f}x"
        print(line.format(t["workload"], fmt(t["raio"]), fmt(t["dask"]), t["unit"], ratio))
    print()
    batch = next((r["detail"].get("batch") for r in dask_doc.get("results", [])
                  if "batch" in r.get("detail", {})), None)
    import_s = next((r["detail"]["import_distributed_s"] for r in dask_doc.get("results", [])
                     if "import_distributed_s" in r.get("detail", {})), float("nan"))
    notes = [f"Dask async batches are {batch} tasks/calls (raio: 10,000); the figures are rates.",
             "Dask Put/Get: scatter / Future.result() of a numpy uint8 array over TCP; raio: "
             "shared-memory object store (1 GiB not run on Dask).",
             "Dask start to first result: LocalCluster + Client + one task in-process, "
             f"not counting `import distributed` ({import_s:.2f} s); "
             "raio: a fresh process from before Init."]
    m = raio_doc.get("machine", {})
    notes.append(f"load average 1m: raio {m.get('loadavg_1m_before', 0):.2f} -> "
                 f"{m.get('loadavg_1m_after', 0):.2f}, dask {dask_doc.get('loadavg_1m_before', 0):.2f}"
                 f" -> {dask_doc.get('loadavg_1m_after', 0):.2f} ({m.get('nproc', '?')} CPUs)")
    if dask_doc.get("errors"):
        notes.append(f"dask_bench errors: {dask_doc['errors']}")
    for n in notes:
        print("note: " + n)

    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump({"timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "table": table, "notes": notes, "raio": raio_doc, "dask": dask_doc}, f,
                  indent=2)
        f.write("\n")
    print(f"\ncombined results written to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
