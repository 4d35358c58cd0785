"""One thread reads one large object in order through the read ioctl (GPU readahead, docs/architecture.md).

  inorder_bench.py --file MP/KEY [--sha256 HEX] [--steps 4MiB,64MiB] [--rounds 3]
                   [--device cuda|host] [--metrics http://127.0.0.1:9737/metrics]

For each step size, ROUNDS times: open the file, issue read ioctls of STEP bytes one after the
other from one thread, each at the next offset and landing at the same offset of one device buffer
the size of the object (what cuFile programs and simple loaders do), close; the clock covers the
ioctls only. After every round the whole buffer's sha256 is checked against --sha256 (by default
the file's, read once through POSIX before the first round, untimed) and the buffer is zeroed.
Prints one JSON object: per step the GB/s of each round and the best, the ioctl count, and, with
--metrics, how many bytes the daemon served from readahead and dropped during the step's rounds.
Exits 1 when a checksum differs or an ioctl fails.

--device host reads into a HostBuffer: for a mount whose daemon runs the host stand-in.
"""
import argparse
import hashlib
import json
import os
import re
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
CHUNK = 256 << 20  # bytes hashed per slice of the buffer


def size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r}: not a size (4MiB, 64MiB, 1048576)")
    return int(m.group(1)) * UNITS[m.group(2).lower()]


def counters(url):
    """The daemon's readahead counters, or {} without --metrics."""
    if not url:
        return {}
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    out = {}
    for name in ("gpu_read_ahead_served_bytes_total", "gpu_read_ahead_dropped_bytes_total",
                 "gpu_read_ahead_bytes_total", "gpu_fetched_bytes_total"):
        m = re.search(rf"^s3gdsfs_{name} (\S+)$", text, re.M)
        out[name] = float(m.group(1)) if m else float("nan")
    return out


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return h.hexdigest()
            h.update(b)


class Device:
    """One destination the size of the object, on the GPU or a host stand-in buffer."""

    def __init__(self, kind, nbytes):
        self.kind, self.nbytes = kind, nbytes
        if kind == "cuda":
            import torch
            torch.cuda.set_device(0)
            self.torch = torch
            self.buf = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
        else:
            import s3gds
            self.buf = s3gds.HostBuffer(nbytes)

    def sha256(self):
        h = hashlib.sha256()
        if self.kind == "cuda":
            for off in range(0, self.nbytes, CHUNK):
                h.update(self.buf[off:off + CHUNK].cpu().numpy().tobytes())
        else:
            view = self.buf.view()
            for off in range(0, self.nbytes, CHUNK):
                h.update(view[off:off + CHUNK])
            view.release()
        return h.hexdigest()

    def zero(self):
        if self.kind == "cuda":
            self.buf.zero_()
            self.torch.cuda.synchronize()
        else:
            view = self.buf.view()
            for off in range(0, self.nbytes, CHUNK):
                n = min(CHUNK, self.nbytes - off)
                view[off:off + n] = bytes(n)
            view.release()


def one_round(path, dev, nbytes, step):
    import s3gds
    fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        off, ioctls = 0, 0
        while off < nbytes:
            n = min(step, nbytes - off)
            r = s3gds.read_into(dev.buf, None, offset=off, length=n, fd=fd, dst_offset=off)
            if r.nbytes != n:
                raise OSError(f"ioctl at {off}: {r.nbytes} of {n} bytes")
            off += n
            ioctls += 1
        return time.perf_counter() - t0, ioctls
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", required=True, help="the object's path under the mount")
    ap.add_argument("--sha256", help="the object's sha256 (default: read the file once through POSIX)")
    ap.add_argument("--steps", default="4MiB,64MiB", help="ioctl sizes, comma-separated (default 4MiB,64MiB)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", choices=("cuda", "host"), default="cuda")
    ap.add_argument("--metrics", help="the daemon's /metrics URL, for the readahead counters")
    args = ap.parse_args()
    steps = [size(s) for s in args.steps.split(",") if s.strip()]
    if not steps or min(steps) <= 0 or args.rounds < 1:
        ap.error("--steps needs sizes above 0 and --rounds at least 1")

    nbytes = os.stat(args.file).st_size
    want = args.sha256 or file_sha256(args.file)
    dev = Device(args.device, nbytes)
    out = {"file": args.file, "bytes": nbytes, "device": args.device, "rounds": args.rounds, "steps": {}}
    ok = True
    for step in steps:
        before = counters(args.metrics)
        gbps, ioctls, errors = [], 0, []
        for _ in range(args.rounds):
            try:
                secs, ioctls = one_round(args.file, dev, nbytes, step)
            except OSError as e:
                errors.append(str(e))
                ok = False
                break
            got = dev.sha256()
            if got != want:
                errors.append(f"sha256 {got}, want {want}")
                ok = False
            gbps.append(round(nbytes / secs / 1e9, 3))
            dev.zero()
        after = counters(args.metrics)
        entry = {"step": step, "ioctls": ioctls, "gbps": gbps, "best_gbps": max(gbps) if gbps else None,
                 "errors": errors}
        for name in after:
            entry[name.replace("gpu_", "").replace("_total", "")] = after[name] - before[name]
        out["steps"][str(step)] = entry
    print(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
