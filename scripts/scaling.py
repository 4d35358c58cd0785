"""Scaling benchmark: N processes, each with several threads, reading objects
through one s3gdsfs mount, POSIX reads or GPU reads (the ioctl), against raw
minio-go GETs with the same total streams measured by the caller.

  python3 scaling.py --path posix|gpu --mount MP --manifest big.json --ops-manifest mid.json \
      --procs 1,2,4,8 --threads 8 --seconds 8 --raw-dir DIR --label NAME --out result.json

Each process reports its bytes and reads; the daemon's stats attribute gives
the bytes by transport. Prints progress on stderr, writes one JSON file.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))

import s3gds  # noqa: E402


def worker(path, mount, objs, threads, seconds, idx, start_evt, q, device):
    if path in ("gpu", "posix-copy"):
        import torch
        torch.cuda.set_device(device)
        size = max(o["size"] for o in objs)
        bufs = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}") for _ in range(threads)]
        if path == "posix-copy":
            # POSIX reads into pinned host memory, then one copy to the
            # device: what a program does without the ioctl.
            hosts = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(threads)]
            views = [memoryview(h.numpy()) for h in hosts]
            streams = [torch.cuda.Stream() for _ in range(threads)]
        torch.cuda.synchronize()
    fds = {o["key"]: os.open(os.path.join(mount, o["key"]), os.O_RDONLY) for o in objs}

    def land(t, o):
        """Object o in thread t's device buffer, by the ioctl or by POSIX reads plus a copy."""
        if path == "gpu":
            return s3gds.read_into(bufs[t], None, fd=fds[o["key"]], length=o["size"]).nbytes
        got, size = 0, o["size"]
        while got < size:
            n = os.preadv(fds[o["key"]], [views[t][got:min(size, got + (8 << 20))]], got)
            if n <= 0:
                raise OSError(f"short read at {got} of {size}")
            got += n
        with torch.cuda.stream(streams[t]):
            bufs[t][:size].copy_(hosts[t][:size], non_blocking=True)
        streams[t].synchronize()
        return size

    if path in ("gpu", "posix-copy"):
        # Untimed: each buffer's first read imports it into the daemon, once per process, and
        # a daemon that has been serving has its staging ring, blocks and connections up.
        ws = [threading.Thread(target=land, args=(t, objs[t % len(objs)])) for t in range(threads)]
        [w.start() for w in ws]; [w.join() for w in ws]
    counts = [0] * threads
    nbytes = [0] * threads
    errors = []
    q.put(("ready", idx, None))
    start_evt.wait()
    stop = time.time() + seconds

    last = [None] * threads

    def run(t):
        k = idx * threads + t
        buf = bytearray(1 << 20) if path == "posix" else None
        try:
            while time.time() < stop:
                o = objs[k % len(objs)]
                k += 1
                if path in ("gpu", "posix-copy"):
                    nbytes[t] += land(t, o)
                    last[t] = o
                else:
                    fd = os.open(os.path.join(mount, o["key"]), os.O_RDONLY)
                    try:
                        while True:
                            n = os.readv(fd, [buf])
                            if n <= 0:
                                break
                            nbytes[t] += n
                    finally:
                        # Drop the kernel's cached pages: every pass reads
                        # from the daemon, as a dataset larger than memory would.
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        os.close(fd)
                counts[t] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    t0 = time.time()
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # Only the reading is timed; the checks below are not.
    elapsed = time.time() - t0
    bad = 0
    if path in ("gpu", "posix-copy"):
        # Every thread's last object is checked byte for byte.
        import hashlib
        for t in range(threads):
            if last[t] is not None:
                got = hashlib.sha256(bufs[t][: last[t]["size"]].cpu().numpy().tobytes()).hexdigest()
                bad += got != last[t]["sha256"]
    q.put(("done", idx, {"bytes": sum(nbytes), "reads": sum(counts), "seconds": elapsed, "errors": errors,
                         "checked_bad": bad}))
    for fd in fds.values():
        os.close(fd)


def run_n(path, mount, objs, n, threads, seconds, devices):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start_evt = ctx.Event()
    ps = [ctx.Process(target=worker, args=(path, mount, objs, threads, seconds, i, start_evt, q, i % devices))
          for i in range(n)]
    for p in ps:
        p.start()
    ready = 0
    while ready < n:
        kind, _, _ = q.get(timeout=300)
        ready += kind == "ready"
    before = s3gds.stats(mount)
    start_evt.set()
    results = {}
    while len(results) < n:
        kind, idx, val = q.get(timeout=seconds + 300)
        if kind == "done":
            results[idx] = val
    after = s3gds.stats(mount)
    # Every process starts on the same event and stops at the same deadline;
    # the slowest one's reading time is the run's (its checks excluded).
    wall = max(r["seconds"] for r in results.values())
    for p in ps:
        p.join(timeout=60)
    by = lambda s, k: s.get(k, {})  # noqa: E731
    rdma = by(after, "gpu_read_bytes_total").get("rdma", 0) - by(before, "gpu_read_bytes_total").get("rdma", 0)
    http = by(after, "gpu_read_bytes_total").get("http", 0) - by(before, "gpu_read_bytes_total").get("http", 0)
    declined = {k: v - by(before, "gpu_declined_bytes_total").get(k, 0)
                for k, v in by(after, "gpu_declined_bytes_total").items()}
    total = sum(r["bytes"] for r in results.values())
    per = [results[i]["bytes"] for i in range(n)]
    mean = total / n
    return {
        "procs": n, "threads": threads, "seconds": wall,
        "gbps": total / wall / 1e9,
        "ops_per_s": sum(r["reads"] for r in results.values()) / wall,
        "per_process_gbps": [b / wall / 1e9 for b in per],
        "max_share_deviation": max(abs(b - mean) / mean for b in per) if mean else None,
        "transport_share": {"rdma": rdma / max(rdma + http, 1), "http": http / max(rdma + http, 1)} if path == "gpu" else None,
        "declined_bytes": {k: v for k, v in declined.items() if v},
        "errors": [e for r in results.values() for e in r["errors"]],
        "buffers_not_matching": sum(r.get("checked_bad", 0) for r in results.values()),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", choices=["posix", "gpu", "posix-copy"], required=True)
    ap.add_argument("--mount", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--ops-manifest")
    ap.add_argument("--procs", default="1,2,4,8")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--raw-dir")
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    big = json.load(open(args.manifest))["objects"]
    mid = json.load(open(args.ops_manifest))["objects"] if args.ops_manifest else []
    out = {"label": args.label, "path": args.path, "object_bytes": big[0]["size"], "runs": [], "ops_runs": []}
    for n in [int(x) for x in args.procs.split(",")]:
        r = run_n(args.path, args.mount, big, n, args.threads, args.seconds, args.devices)
        if args.raw_dir:
            raw = os.path.join(args.raw_dir, f"raw_big_{n * args.threads}.json")
            if os.path.exists(raw):
                r["raw"] = json.load(open(raw))
                r["ratio_to_raw"] = r["gbps"] / r["raw"]["gbps"]
        out["runs"].append(r)
        print(f"{args.label} N={n}: {r['gbps']:.2f} GB/s, raw {r.get('raw', {}).get('gbps', 0):.2f}, "
              f"share deviation {r['max_share_deviation']:.3f}", file=sys.stderr, flush=True)
        if mid:
            o = run_n(args.path, args.mount, mid, n, args.threads, args.seconds, args.devices)
            if args.raw_dir:
                raw = os.path.join(args.raw_dir, f"raw_mid_{n * args.threads}.json")
                if os.path.exists(raw):
                    o["raw"] = json.load(open(raw))
            out["ops_runs"].append(o)
            print(f"{args.label} N={n} 64MiB: {o['ops_per_s']:.1f} ops/s", file=sys.stderr, flush=True)
    json.dump(out, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
