"""The peers of s3gdsfs: other libraries landing the same S3 objects in GPU
device memory, measured the way scripts/scaling.py measures the mount: N
processes x T threads, time-based, each thread reading whole objects round
robin into its own device buffer, every thread's last object checked byte for
byte (sha256 of the device buffer) after the timed part.

  python3 scripts/gpu/peers.py --peer kvikio,s3torchconnector,boto3 --manifest big.json \
      [--ops-manifest mid.json] --procs 1,8 --threads 8 --seconds 5 \
      [--endpoint http://127.0.0.1:7070] [--bucket bench] [--region us-east-1] \
      [--device cuda|cpu] [--devices 1] [--raw-dir DIR] --label NAME --out result.json

Peers (--peer, comma separated; all three by default):
  kvikio            kvikio.RemoteFile.open_s3 (path style: ENDPOINT/BUCKET/KEY, SigV4
                    from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), .read() straight
                    into the device buffer (kvikio stages through its own pinned
                    bounce buffers).
  s3torchconnector  s3torchconnector's S3Client (the CRT-based Mountpoint client),
                    force_path_style, a range-based reader with no buffer, readinto
                    a pinned host buffer, then one copy to the device.
  boto3             get_object (path style), Body.readinto a pinned host buffer, then
                    one copy to the device.

Every library runs with its defaults (recorded under "config" in each entry).
Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.

--device cpu (for trying the script without a GPU): the "device" buffers and
the host buffers are numpy arrays in ordinary memory and torch is not
imported by this script (s3torchconnector imports torch itself).

Writes one JSON file: {"label", "endpoint", "bucket", "device", "peers": [entry, ...]},
one entry per requested peer, each shaped like a scaling.py result ({"label",
"path", "object_bytes", "runs", "ops_runs"}, plus "peer", "ok", "error",
"config"). A peer that cannot be imported or set up gets "ok": false and its
error. Prints one line per peer and N on stderr. Exits 1 only when every
requested peer failed.
"""

import argparse
import hashlib
import importlib
import json
import multiprocessing as mp
import os
import queue
import sys
import threading
import time

PEERS = ("kvikio", "s3torchconnector", "boto3")
# What each peer needs importable; a missing one fails that peer only.
MODULES = {
    "kvikio": ("kvikio",),
    "s3torchconnector": ("s3torchconnector", "s3torchconnector._s3client"),
    "boto3": ("boto3", "botocore.config"),
}


def import_error(peer):
    """None if the peer's packages import, otherwise a message naming the peer."""
    for m in MODULES[peer]:
        try:
            importlib.import_module(m)
        except Exception as e:  # noqa: BLE001 (ImportError, or a native library that did not load)
            return f"{peer}: cannot import {m}: {type(e).__name__}: {e}"
    return None


# ---------------------------------------------------------------- memory


class CudaMem:
    """Device buffers are torch CUDA tensors; host buffers are pinned tensors."""

    def __init__(self, index):
        import torch
        self.torch = torch
        self.index = index
        torch.cuda.set_device(index)

    def thread_init(self):
        self.torch.cuda.set_device(self.index)

    def device_buffer(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, device=f"cuda:{self.index}")

    def host_buffer(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, pin_memory=True)

    def host_view(self, h):
        return memoryview(h.numpy())

    def stream(self):
        return self.torch.cuda.Stream(device=self.index)

    def to_device(self, dev, host, n, stream):
        with self.torch.cuda.stream(stream):
            dev[:n].copy_(host[:n], non_blocking=True)
        stream.synchronize()

    def sync(self):
        self.torch.cuda.synchronize(self.index)

    def sha256(self, dev, n):
        return hashlib.sha256(dev[:n].cpu().numpy()).hexdigest()


class CpuMem:
    """--device cpu: numpy arrays stand for both kinds of buffer."""

    def __init__(self, index):
        import numpy
        self.np = numpy

    def thread_init(self):
        pass

    def device_buffer(self, n):
        return self.np.empty(n, dtype=self.np.uint8)

    host_buffer = device_buffer

    def host_view(self, h):
        return memoryview(h)

    def stream(self):
        return None

    def to_device(self, dev, host, n, stream):
        self.np.copyto(dev[:n], host[:n])

    def sync(self):
        pass

    def sha256(self, dev, n):
        return hashlib.sha256(memoryview(dev[:n])).hexdigest()


# ---------------------------------------------------------------- peers
# Each setup_* runs in the worker before the start event (not timed) and
# returns (read, config): read(t, obj) lands the whole object in bufs[t][:size]
# and returns its size; it is called from thread t only.


def setup_kvikio(cfg, objs, threads, mem, bufs):
    import kvikio
    import kvikio.defaults
    # kvikio's defaults, none changed here (each can be set by environment):
    # one global thread pool of KVIKIO_NTHREADS=1 thread per process, reads
    # split into KVIKIO_TASK_SIZE=4 MiB tasks, device reads staged through
    # KVIKIO_BOUNCE_BUFFER_SIZE=16 MiB pinned bounce buffers, the libcurl
    # easy-handle backend in that pool (KVIKIO_REMOTE_IO_BACKEND=EASY_THREADPOOL),
    # KVIKIO_HTTP_MAX_ATTEMPTS=3, KVIKIO_HTTP_TIMEOUT=60 s. So by default the
    # T Python threads of one process share one kvikio I/O thread; the
    # effective values are recorded under "config".
    conf = {"version": kvikio.__version__}
    for k in ("num_threads", "task_size", "bounce_buffer_size", "compat_mode", "remote_io_backend",
              "remote_io_num_reactors", "remote_io_max_concurrent_requests", "http_max_attempts", "http_timeout"):
        try:
            v = kvikio.defaults.get(k)
            conf[k] = getattr(v, "name", v)
        except Exception as e:  # noqa: BLE001 (a name this version lacks)
            conf[k] = f"unavailable: {e}"
    # Once per object, opening without nbytes asks the server for the size
    # (a HEAD): the endpoint and the credentials are tried here, before the
    # start, and a manifest that is wrong about a size fails now (kvikio's
    # read does not notice a body shorter than asked for).
    for o in objs:
        n = kvikio.RemoteFile.open_s3(cfg["bucket"], o["key"], aws_region_name=cfg["region"],
                                      aws_endpoint_url=cfg["endpoint"]).nbytes()
        if n != o["size"]:
            raise ValueError(f"kvikio: {o['key']} is {n} bytes, manifest says {o['size']}")
    # One handle per thread and object; with nbytes given, opening sends no
    # request. The URL is ENDPOINT/BUCKET/KEY (path style), signed with SigV4
    # for the region, credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
    handles = [{o["key"]: kvikio.RemoteFile.open_s3(cfg["bucket"], o["key"], nbytes=o["size"],
                                                   aws_region_name=cfg["region"],
                                                   aws_endpoint_url=cfg["endpoint"])
                for o in objs} for _ in range(threads)]

    def read(t, o):
        size = o["size"]
        n = handles[t][o["key"]].read(bufs[t][:size], size, 0)
        if n != size:
            raise OSError(f"kvikio: short read of {o['key']}: {n} of {size}")
        return n

    return read, conf


def host_staging(mem, threads, size):
    hosts = [mem.host_buffer(size) for _ in range(threads)]
    return hosts, [mem.host_view(h) for h in hosts], [mem.stream() for _ in range(threads)]


def setup_s3torchconnector(cfg, objs, threads, mem, bufs):
    import s3torchconnector
    from s3torchconnector import S3ReaderConstructor
    from s3torchconnector._s3client import S3Client, S3ClientConfig
    # The library's defaults (throughput target, part size, retries), path
    # style added: the server is addressed as ENDPOINT/BUCKET/KEY.
    sc = S3ClientConfig(force_path_style=True)
    client = S3Client(cfg["region"], endpoint=cfg["endpoint"], s3client_config=sc)
    # One HEAD per object here, so that no HEAD is timed; the results are
    # passed as object_info below.
    infos = {}
    for o in objs:
        info = client.head_object(cfg["bucket"], o["key"])
        if info.size != o["size"]:
            raise ValueError(f"s3torchconnector: {o['key']} is {info.size} bytes, manifest says {o['size']}")
        infos[o["key"]] = info
    # A range-based reader with no buffer of its own: one GET of the whole
    # object whose parts are copied straight into the pinned buffer (the
    # default, sequential reader gathers the object in a BytesIO first).
    ctor = S3ReaderConstructor.range_based(buffer_size=0)
    hosts, views, streams = host_staging(mem, threads, max(o["size"] for o in objs))
    conf = {"version": s3torchconnector.__version__, "reader": "range_based(buffer_size=0)",
            "throughput_target_gbps": sc.throughput_target_gbps, "part_size": sc.part_size,
            "max_attempts": sc.max_attempts, "force_path_style": sc.force_path_style,
            "client": "one S3Client per process, shared by its threads"}

    def read(t, o):
        size = o["size"]
        r = client.get_object(cfg["bucket"], o["key"], object_info=infos[o["key"]], reader_constructor=ctor)
        got = 0
        while got < size:
            n = r.readinto(views[t][got:size])
            if not n:
                raise OSError(f"s3torchconnector: short read of {o['key']}: {got} of {size}")
            got += n
        mem.to_device(bufs[t], hosts[t], size, streams[t])
        return size

    return read, conf


def setup_boto3(cfg, objs, threads, mem, bufs):
    import boto3
    from botocore.config import Config
    # One client per process, shared by its threads (boto3 clients are
    # thread-safe); its pool holds a connection per thread at least.
    pool = max(10, threads)
    client = boto3.session.Session().client(
        "s3", endpoint_url=cfg["endpoint"], region_name=cfg["region"],
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=pool))
    # One HEAD per object before the start: endpoint, credentials and sizes.
    for o in objs:
        n = client.head_object(Bucket=cfg["bucket"], Key=o["key"])["ContentLength"]
        if n != o["size"]:
            raise ValueError(f"boto3: {o['key']} is {n} bytes, manifest says {o['size']}")
    hosts, views, streams = host_staging(mem, threads, max(o["size"] for o in objs))
    tails = [bytearray(1) for _ in range(threads)]
    conf = {"version": boto3.__version__, "max_pool_connections": pool, "addressing_style": "path",
            "client": "one client per process, shared by its threads"}

    def read(t, o):
        size = o["size"]
        body = client.get_object(Bucket=cfg["bucket"], Key=o["key"])["Body"]
        try:
            got = 0
            while got < size:
                n = body.readinto(views[t][got:size])
                if not n:
                    raise OSError(f"boto3: short read of {o['key']}: {got} of {size}")
                got += n
            # The end of the body: botocore checks the length (and a checksum
            # the server sent) when a read returns nothing.
            if body.readinto(tails[t]):
                raise OSError(f"boto3: {o['key']} is longer than the manifest's {size} bytes")
        finally:
            body.close()
        mem.to_device(bufs[t], hosts[t], size, streams[t])
        return size

    return read, conf


SETUP = {"kvikio": setup_kvikio, "s3torchconnector": setup_s3torchconnector, "boto3": setup_boto3}


# ---------------------------------------------------------------- runs


def worker(peer, cfg, objs, threads, seconds, idx, start_evt, abort_evt, q, device):
    try:
        mem = (CudaMem if cfg["device"] == "cuda" else CpuMem)(device)
        size = max(o["size"] for o in objs)
        bufs = [mem.device_buffer(size) for _ in range(threads)]
        read, conf = SETUP[peer](cfg, objs, threads, mem, bufs)
        mem.sync()
    except BaseException as e:  # noqa: BLE001
        q.put(("failed", idx, f"{peer}: set-up failed: {type(e).__name__}: {e}"))
        return
    q.put(("ready", idx, conf))
    start_evt.wait()
    if abort_evt.is_set():
        return
    stop = time.time() + seconds
    counts = [0] * threads
    nbytes = [0] * threads
    last = [None] * threads
    errors = []

    def run(t):
        mem.thread_init()
        k = idx * threads + t
        try:
            while time.time() < stop:
                o = objs[k % len(objs)]
                k += 1
                nbytes[t] += read(t, o)
                last[t] = o
                counts[t] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(f"{peer}: {type(e).__name__}: {e}")

    t0 = time.time()
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # Only the reading is timed; the checks below are not.
    elapsed = time.time() - t0
    bad = checked = 0
    try:
        mem.sync()
        for t in range(threads):
            if last[t] is not None:
                checked += 1
                bad += mem.sha256(bufs[t], last[t]["size"]) != last[t]["sha256"]
    except Exception as e:  # noqa: BLE001
        errors.append(f"{peer}: check failed: {type(e).__name__}: {e}")
    q.put(("done", idx, {"bytes": sum(nbytes), "reads": sum(counts), "seconds": elapsed, "errors": errors,
                         "checked": checked, "checked_bad": bad}))


def collect(q, ps, want, timeout):
    """Messages from every process until each has sent one of the kinds in
    want (or 'failed'); a process that dies without a word is an error."""
    got = {}
    deadline = time.time() + timeout
    quiet = {}
    while len(got) < len(ps):
        try:
            kind, idx, val = q.get(timeout=1)
            if kind in want or kind == "failed":
                got[idx] = (kind, val)
            continue
        except queue.Empty:
            pass
        for i, p in enumerate(ps):
            if i in got or p.exitcode is None:
                continue
            # Its last message may still be in the pipe: give it a few polls.
            quiet[i] = quiet.get(i, 0) + 1
            if p.exitcode != 0 or quiet[i] > 5:
                got[i] = ("failed", f"worker {i} exited with code {p.exitcode} without reporting")
        if time.time() > deadline:
            for i in range(len(ps)):
                got.setdefault(i, ("failed", f"worker {i}: no report in {timeout:.0f} s"))
    return got


def run_n(peer, cfg, objs, n, threads, seconds, devices):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start_evt = ctx.Event()
    abort_evt = ctx.Event()
    ps = [ctx.Process(target=worker, args=(peer, cfg, objs, threads, seconds, i, start_evt, abort_evt, q, i % devices))
          for i in range(n)]
    for p in ps:
        p.start()
    try:
        ready = collect(q, ps, ("ready",), 300)
        failed = sorted({v for kind, v in ready.values() if kind == "failed"})
        if failed:
            abort_evt.set()
            start_evt.set()
            raise RuntimeError("; ".join(failed))
        conf = ready[0][1]
        start_evt.set()
        done = collect(q, ps, ("done",), seconds + 300)
        failed = sorted({v for kind, v in done.values() if kind == "failed"})
        if failed:
            raise RuntimeError("; ".join(failed))
    finally:
        for p in ps:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    results = {i: v for i, (_, v) in done.items()}
    # Every process starts on the same event and stops at the same deadline;
    # the slowest one's reading time is the run's (its checks excluded).
    wall = max(r["seconds"] for r in results.values())
    total = sum(r["bytes"] for r in results.values())
    per = [results[i]["bytes"] for i in range(n)]
    mean = total / n
    return {
        "procs": n, "threads": threads, "seconds": wall,
        "bytes": total, "reads": sum(r["reads"] for r in results.values()),
        "gbps": total / wall / 1e9,
        "ops_per_s": sum(r["reads"] for r in results.values()) / wall,
        "per_process_gbps": [b / wall / 1e9 for b in per],
        "max_share_deviation": max(abs(b - mean) / mean for b in per) if mean else None,
        "errors": [e for r in results.values() for e in r["errors"]],
        "buffers_checked": sum(r["checked"] for r in results.values()),
        "buffers_not_matching": sum(r["checked_bad"] for r in results.values()),
    }, conf


def attach_raw(r, raw_dir, kind, n, threads):
    if raw_dir:
        raw = os.path.join(raw_dir, f"raw_{kind}_{n * threads}.json")
        if os.path.exists(raw):
            r["raw"] = json.load(open(raw))
            if r["raw"].get("gbps"):
                r["ratio_to_raw"] = r["gbps"] / r["raw"]["gbps"]


def summary(label, peer, r, what=""):
    per = r["per_process_gbps"]
    return (f"{label} {peer} N={r['procs']}{what}: {r['gbps']:.2f} GB/s, {r['ops_per_s']:.1f} ops/s, "
            f"per process {min(per):.2f}-{max(per):.2f} GB/s, errors {len(r['errors'])}, "
            f"buffers not matching {r['buffers_not_matching']}/{r['buffers_checked']}"
            + (f", first error: {r['errors'][0]}" if r["errors"] else ""))


def run_peer(peer, args, cfg, big, mid, procs):
    entry = {"label": f"{args.label}-{peer}", "path": f"peer-{peer}", "peer": peer, "ok": False, "error": None,
             "config": None, "object_bytes": big[0]["size"], "runs": [], "ops_runs": []}
    err = import_error(peer)
    if err:
        entry["error"] = err
        print(f"{args.label} {peer}: FAILED: {err}", file=sys.stderr, flush=True)
        return entry
    try:
        for n in procs:
            r, entry["config"] = run_n(peer, cfg, big, n, args.threads, args.seconds, args.devices)
            attach_raw(r, args.raw_dir, "big", n, args.threads)
            entry["runs"].append(r)
            print(summary(args.label, peer, r), file=sys.stderr, flush=True)
            if mid:
                o, _ = run_n(peer, cfg, mid, n, args.threads, args.seconds, args.devices)
                attach_raw(o, args.raw_dir, "mid", n, args.threads)
                entry["ops_runs"].append(o)
                print(summary(args.label, peer, o, f" {mid[0]['size'] >> 20}MiB"), file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001
        entry["error"] = f"{peer}: {type(e).__name__}: {e}" if not str(e).startswith(peer) else str(e)
        print(f"{args.label} {peer}: FAILED: {entry['error']}", file=sys.stderr, flush=True)
        return entry
    runs = entry["runs"] + entry["ops_runs"]
    errors = sorted({e for r in runs for e in r["errors"]})
    if not any(r["reads"] for r in runs):
        entry["error"] = f"{peer}: no object was read: " + "; ".join(errors[:3])
    elif errors:
        # A thread stops at its first error: the run measured fewer streams.
        entry["error"] = f"{peer}: {sum(len(r['errors']) for r in runs)} threads stopped on errors: " + "; ".join(errors[:3])
    elif any(r["buffers_not_matching"] for r in runs):
        entry["error"] = f"{peer}: device buffers not matching the manifest's sha256"
    entry["ok"] = entry["error"] is None
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", default=",".join(PEERS), help="comma separated: " + ", ".join(PEERS))
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--ops-manifest")
    ap.add_argument("--procs", default="1,8")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:7070"))
    ap.add_argument("--bucket", default="bench")
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1")))
    ap.add_argument("--raw-dir")
    ap.add_argument("--label", default="peers")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    peers = [p.strip() for p in args.peer.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if unknown or not peers:
        ap.error(f"unknown peer {unknown}; choose from {', '.join(PEERS)}")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if not os.environ.get(k):
            print(f"warning: {k} is not set", file=sys.stderr)
    big = json.load(open(args.manifest))["objects"]
    mid = json.load(open(args.ops_manifest))["objects"] if args.ops_manifest else []
    procs = [int(x) for x in args.procs.split(",")]
    cfg = {"endpoint": args.endpoint.rstrip("/"), "bucket": args.bucket, "region": args.region, "device": args.device}
    out = {"label": args.label, "endpoint": cfg["endpoint"], "bucket": args.bucket, "device": args.device,
           "procs": procs, "threads": args.threads, "seconds": args.seconds, "peers": []}
    for peer in peers:
        out["peers"].append(run_peer(peer, args, cfg, big, mid, procs))
        json.dump(out, open(args.out, "w"), indent=1)  # what is done so far survives a later crash
    json.dump(out, open(args.out, "w"), indent=1)
    ok = [e["peer"] for e in out["peers"] if e["ok"]]
    print(f"{args.label}: peers ok: {', '.join(ok) or 'none'}; failed: "
          f"{', '.join(e['peer'] for e in out['peers'] if not e['ok']) or 'none'}", file=sys.stderr, flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
