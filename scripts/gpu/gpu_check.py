"""GPU read checks and benchmark, run on a machine with a GPU and torch.

Reads objects of a mounted bucket into CUDA tensors through the s3gdsfs ioctl
and checks every byte against the sha256 the uploader recorded; then measures
one process with several threads, then several processes at once with one of
them killed mid-run. Prints one JSON report.

  python3 gpu_check.py --mount MP --manifest objects.json [--threads 8] [--seconds 15] [--procs 8]
"""

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import s3gds  # noqa: E402


def sha256_of(t, n):
    return hashlib.sha256(t[:n].cpu().numpy().tobytes()).hexdigest()


def root_stats(mount):
    return s3gds.stats(mount)


def correctness(torch, mount, objs):
    """Reads into tensors the caching allocator carved out of larger blocks."""
    out = []
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    o = objs[0]
    off = (256 << 20) + 4000
    view = big[off:off + o["size"]]
    shared = view.untyped_storage()._share_cuda_()
    r = s3gds.read_into(view, os.path.join(mount, o["key"]))
    ok = r.nbytes == o["size"] and sha256_of(view, o["size"]) == o["sha256"]
    out.append({"case": "view 256 MiB + 4000 into a 1 GiB block", "storage_offset": shared[3],
                "tensor_offset": view.storage_offset(), "nbytes": r.nbytes, "transport": r.transport, "ok": ok})

    # Two small tensors from one caching-allocator segment: the second sits at
    # a non-zero offset inside the cudaMalloc block.
    small = [x for x in objs if x["size"] <= (8 << 20)]
    if small:
        s = small[0]
        a = torch.empty(s["size"], dtype=torch.uint8, device="cuda")
        b = torch.empty(s["size"], dtype=torch.uint8, device="cuda")
        off_b = b.untyped_storage()._share_cuda_()[3]
        r = s3gds.read_into(b, os.path.join(mount, s["key"]))
        ok = r.nbytes == s["size"] and sha256_of(b, s["size"]) == s["sha256"]
        out.append({"case": "second small tensor of one segment", "storage_offset": off_b, "nbytes": r.nbytes, "ok": ok})
        del a, b

    # Past the end: short; zero length: nothing; a float tensor at an element offset.
    t = torch.zeros(o["size"] // 4 + 1024, dtype=torch.float32, device="cuda")
    r = s3gds.read_into(t, os.path.join(mount, o["key"]), offset=o["size"] - 1000)
    out.append({"case": "read across EOF is short", "nbytes": r.nbytes, "ok": r.nbytes == 1000})
    r = s3gds.read_into(t, os.path.join(mount, o["key"]), length=0)
    out.append({"case": "zero length", "nbytes": r.nbytes, "ok": r.nbytes == 0 and r.transport is None})
    f = t[7:]  # element offset 7 * 4 bytes
    r = s3gds.read_into(f, os.path.join(mount, o["key"]), length=4 << 20)
    want = hashlib.sha256()
    with open(os.path.join(mount, o["key"]), "rb") as fh:
        want.update(fh.read(4 << 20))
    got = hashlib.sha256(f.view(torch.uint8)[: 4 << 20].cpu().numpy().tobytes()).hexdigest()
    out.append({"case": "float32 view at element offset 7, checked against a POSIX read", "ok": got == want.hexdigest()})

    # A device that does not exist: ENODEV, and the daemon keeps serving.
    try:
        fake = torch.empty(16, dtype=torch.uint8, device="cuda")
        req_dev = torch.cuda.device_count() + 3

        class Wrong:  # a tensor on a device the daemon cannot have
            pass
        import errno
        from s3gds import _abi
        fd = os.open(os.path.join(mount, o["key"]), os.O_RDONLY)
        try:
            from s3gds._cuda import cuda_destination
            dev, handle, dst_off, cap, sync = cuda_destination(fake)
            req = _abi.pack_request(flags=0, device=req_dev, offset=0, length=16, dst_offset=dst_off, ipc_handle=handle)
            import fcntl
            try:
                fcntl.ioctl(fd, _abi.IOC_READ, req, True)
                code = 0
            except OSError as e:
                code = e.errno
        finally:
            os.close(fd)
        out.append({"case": "device that does not exist", "errno": code, "ok": code == errno.ENODEV})
    except Exception as e:  # noqa: BLE001
        out.append({"case": "device that does not exist", "ok": False, "error": repr(e)})
    torch.cuda.synchronize()
    return out


def throughput(torch, mount, objs, threads, seconds):
    """One process, `threads` threads, each with its own device buffer."""
    size = max(o["size"] for o in objs)
    bufs = [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(threads)]
    # Warm: the first read of each buffer imports it.
    for i in range(threads):
        s3gds.read_into(bufs[i], os.path.join(mount, objs[i % len(objs)]["key"]))
    before = root_stats(mount)
    stop = time.time() + seconds
    counts = [0] * threads
    nbytes = [0] * threads
    call_s = [0.0] * threads
    last = [None] * threads
    errors = []

    def work(i):
        k = i
        fds = {o["key"]: os.open(os.path.join(mount, o["key"]), os.O_RDONLY) for o in objs}
        try:
            while time.time() < stop:
                o = objs[k % len(objs)]
                k += threads
                r = s3gds.read_into(bufs[i], None, fd=fds[o["key"]], length=o["size"])
                counts[i] += 1
                nbytes[i] += r.nbytes
                call_s[i] += r.seconds
                last[i] = o
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            for fd in fds.values():
                os.close(fd)

    t0 = time.time()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    after = root_stats(mount)
    verified = all(last[i] is None or sha256_of(bufs[i], last[i]["size"]) == last[i]["sha256"] for i in range(threads))
    copy_wait = after.get("gpu_copy_wait_seconds_total", 0) - before.get("gpu_copy_wait_seconds_total", 0)
    total = sum(nbytes)
    return {
        "threads": threads, "seconds": wall, "reads": sum(counts), "bytes": total,
        "gbps": total / wall / 1e9, "per_thread_reads": counts,
        "copy_wait_share": copy_wait / max(sum(call_s), 1e-9),
        "last_buffers_verified": verified, "errors": errors,
    }


def proc_worker(mount, objs, idx, reads, q):
    import torch
    torch.cuda.init()
    size = max(o["size"] for o in objs)
    buf = torch.empty(size, dtype=torch.uint8, device="cuda")
    ok = 0
    bad = 0
    t0 = time.time()
    nbytes = 0
    for j in range(reads):
        o = objs[(idx + j) % len(objs)]
        r = s3gds.read_into(buf, os.path.join(mount, o["key"]), length=o["size"])
        nbytes += r.nbytes
        if sha256_of(buf, o["size"]) == o["sha256"]:
            ok += 1
        else:
            bad += 1
        q.put(("progress", idx, j))
    q.put(("done", idx, {"ok": ok, "bad": bad, "bytes": nbytes, "seconds": time.time() - t0}))


def multiprocess(mount, objs, procs, reads, kill_index):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=proc_worker, args=(mount, objs, i, reads, q)) for i in range(procs)]
    for p in ps:
        p.start()
    results = {}
    killed = None
    deadline = time.time() + 300
    while len(results) + (1 if killed is not None else 0) < procs and time.time() < deadline:
        try:
            kind, idx, val = q.get(timeout=5)
        except Exception:  # noqa: BLE001
            continue
        if kind == "progress" and idx == kill_index and killed is None and val >= 1:
            os.kill(ps[idx].pid, signal.SIGKILL)
            killed = idx
        elif kind == "done":
            results[idx] = val
    for p in ps:
        p.join(timeout=30)
    # The killed process's imports are reaped by the daemon within seconds.
    opened = None
    for _ in range(40):
        opened = root_stats(mount).get("gpu_imports_open")
        if opened == 0:
            break
        time.sleep(0.25)
    survivors = [results.get(i) for i in range(procs) if i != killed]
    return {
        "procs": procs, "reads_each": reads, "killed": killed,
        "survivors_ok": all(r is not None and r["bad"] == 0 and r["ok"] == reads for r in survivors),
        "results": results, "imports_open_after": opened,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--small-manifest")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--proc-reads", type=int, default=6)
    ap.add_argument("--only-throughput", action="store_true")
    args = ap.parse_args()
    import torch

    objs = json.load(open(args.manifest))["objects"]
    small = json.load(open(args.small_manifest))["objects"] if args.small_manifest else []
    report = {"caps": s3gds.caps(args.mount), "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0)}
    if args.only_throughput:
        print(json.dumps(throughput(torch, args.mount, objs, args.threads, args.seconds)))
        return
    report["correctness"] = correctness(torch, args.mount, objs + small)
    print(json.dumps({"correctness": report["correctness"]}), flush=True)
    report["throughput"] = throughput(torch, args.mount, objs, args.threads, args.seconds)
    print(json.dumps({"throughput": report["throughput"]}), flush=True)
    report["multiprocess"] = multiprocess(args.mount, objs, args.procs, args.proc_reads, kill_index=3)
    report["daemon_after"] = {k: v for k, v in root_stats(args.mount).items() if k.startswith("gpu_")}
    # The daemon still serves after a caller was killed.
    buf = torch.empty(objs[0]["size"], dtype=torch.uint8, device="cuda")
    r = s3gds.read_into(buf, os.path.join(args.mount, objs[0]["key"]))
    report["read_after_kill_ok"] = sha256_of(buf, objs[0]["size"]) == objs[0]["sha256"]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
