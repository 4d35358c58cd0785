"""Readers of the same objects at the same moment (docs/benchmarks.md, shared fetches).

  share_bench.py --mount MP --manifest huge.json --procs 8 --metrics URL --out JSON

First one process lands every object of the manifest, each into a device buffer of its own, all at
once (a thread per object); then PROCS processes do the same at the same moment; ROUNDS times. Reports the wall
time of each, the ratio, and the bytes the daemon received from the server in each against the
objects' total (s3gdsfs_s3_received_bytes_total from the daemon's metrics). Every buffer of every
process is checked against the manifest's sha256 after the clock stops.
"""
import argparse
import hashlib
import json
import multiprocessing as mp
import os
import re
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))


def received(url):
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    m = re.search(r"^s3gdsfs_s3_received_bytes_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def worker(mount, objs, start_evt, q, device):
    import s3gds
    if device == "cuda":
        import torch
        torch.cuda.set_device(0)
        bufs = [torch.empty(o["size"], dtype=torch.uint8, device="cuda") for o in objs]
        torch.cuda.synchronize()
        data = lambda b: b.cpu().numpy().tobytes()  # noqa: E731
    else:  # a mount whose daemon runs the host stand-in
        bufs = [s3gds.HostBuffer(o["size"]) for o in objs]
        data = lambda b: b.tobytes()  # noqa: E731
    fds = [os.open(os.path.join(mount, o["key"]), os.O_RDONLY) for o in objs]
    q.put(("ready", None))
    start_evt.wait()
    t0 = time.time()
    errors = []

    def one(i):
        try:
            r = s3gds.read_into(bufs[i], None, fd=fds[i], length=objs[i]["size"])
            if r.nbytes != objs[i]["size"]:
                errors.append(f"{objs[i]['key']}: {r.nbytes} bytes")
        except Exception as e:  # noqa: BLE001
            errors.append(f"{objs[i]['key']}: {e!r}")

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(objs))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    end = time.time()
    bad = [o["key"] for o, b in zip(objs, bufs) if hashlib.sha256(data(b)).hexdigest() != o["sha256"]]
    for fd in fds:
        os.close(fd)
    q.put(("done", {"start": t0, "end": end, "errors": errors, "bad": bad}))


def phase(mount, objs, n, url, device):
    ctx = mp.get_context("spawn")
    q, start_evt = ctx.Queue(), ctx.Event()
    ps = [ctx.Process(target=worker, args=(mount, objs, start_evt, q, device)) for _ in range(n)]
    [p.start() for p in ps]
    ready = 0
    while ready < n:
        kind, _ = q.get(timeout=600)
        ready += kind == "ready"
    before = received(url)
    t0 = time.time()
    start_evt.set()
    rs = []
    while len(rs) < n:
        kind, v = q.get(timeout=1200)
        if kind == "done":
            rs.append(v)
    [p.join(timeout=60) for p in ps]
    total = sum(o["size"] for o in objs)
    wall = max(r["end"] for r in rs) - t0
    got = received(url) - before
    return {"procs": n, "seconds": wall, "gbps_delivered": n * total / wall / 1e9, "server_bytes": got,
            "server_bytes_per_total": got / total, "errors": [e for r in rs for e in r["errors"]],
            "buffers_not_matching": sum(len(r["bad"]) for r in rs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--metrics", required=True, help="the daemon's /metrics URL")
    ap.add_argument("--label", default="")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: host buffers, for a daemon on the host stand-in")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of one process, then PROCS, in turn")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds {a.rounds}: want 1 or more")
    objs = json.load(open(a.manifest))["objects"]
    rounds = []
    for rnd in range(a.rounds):
        one = phase(a.mount, objs, 1, a.metrics, a.device)
        many = phase(a.mount, objs, a.procs, a.metrics, a.device)
        rounds.append({"one": one, "many": many, "time_ratio": many["seconds"] / one["seconds"]})
        for r in (one, many):
            print(f"{a.label} round {rnd}, {r['procs']} process(es): {r['seconds']:.2f} s, {r['gbps_delivered']:.2f} GB/s "
                  f"delivered, server sent {r['server_bytes_per_total']:.2f}x the objects, {len(r['errors'])} errors, "
                  f"{r['buffers_not_matching']} buffers differ", flush=True)
    ratios = sorted(r["time_ratio"] for r in rounds)
    res = {"label": a.label, "object_bytes": sum(o["size"] for o in objs), "rounds": rounds,
           "time_ratio_median": ratios[len(ratios) // 2], "time_ratios": [r["time_ratio"] for r in rounds],
           "server_bytes_per_total_max": max(r["many"]["server_bytes_per_total"] for r in rounds),
           "errors": sum(len(r[k]["errors"]) for r in rounds for k in ("one", "many")),
           "buffers_not_matching": sum(r[k]["buffers_not_matching"] for r in rounds for k in ("one", "many"))}
    json.dump(res, open(a.out, "w"), indent=1)
    print(f"{a.label}: {a.procs} processes took {', '.join('%.2f' % x for x in res['time_ratios'])}x the time of one "
          f"(median {res['time_ratio_median']:.2f}); the server sent at most {res['server_bytes_per_total_max']:.2f}x "
          f"the objects; {res['errors']} errors, {res['buffers_not_matching']} buffers differ", flush=True)
    if res["errors"] or res["buffers_not_matching"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
