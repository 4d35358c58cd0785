"""Saving a checkpoint of CUDA tensors to the mount, on the GPU machine.

  save_bench.py --mount MP --endpoint EP --bucket B [--gb 8] [--rounds 3] [--json OUT]

One set of random CUDA tensors (bf16 and f32, a few large and many small, --gb GB in all) is
saved, in alternating order each round, by:

  s3gds       s3gds.save_safetensors to the mount: the tensors leave the GPU through
              S3GDS_IOC_WRITE (the daemon's device-to-host copy into pinned staging);
  safetensors safetensors.torch.save_file to the mount: a host copy of each tensor, write(2);
  raw         the same file's bytes, already in host memory, as one S3 multipart upload with
              boto3: --part-mib parts, --streams at once (the daemon's --write-part-size and
              --write-parts by default): what the store takes with the daemon's streams;
  posix       the same bytes, in host memory, written to the mount with write(2) of 64 MiB:
              a POSIX sequential write of a large file;
  torchsave   torch.save of the tensors to a local directory (--local-dir), then boto3's
              upload_file of that file: what a program without the mount does;
  s3torch     torch.save of the tensors into s3torchconnector's S3Checkpoint writer (AWS's
              connector for PyTorch, streaming to S3 with its own client), where it is installed.

Each figure is the file's bytes over the wall time until the object is in S3 (close(2) returned,
or the multipart upload completed). Every file is checked: safetensors.torch.load_file from the
mount onto the GPU, every tensor's bytes equal to the source's (and, with --sha256, the s3gds and
safetensors files equal to the raw bytes' sha256). The daemon's counters must show the s3gds
save's tensor bytes as GPU write bytes. One JSON line per measurement on stdout, a summary (per
method the GB/s of each round and the median, the ratios of the medians) at the end and in --json.
Exits non-zero if a check fails.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

METHODS = ("s3gds", "safetensors", "raw", "posix", "torchsave", "s3torch")
DEFAULT_METHODS = ("s3gds", "safetensors", "raw", "posix", "torchsave", "s3torch")


def log(rec):
    print(json.dumps(rec), flush=True)


def make_tensors(gb, seed):
    """bf16 matrices of 64-512 MiB, each followed by four f32 vectors of 4-256 KiB, about gb GB in
    all, of random bytes."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    want = int(gb * 1e9)
    big = [64, 128, 256, 512, 192, 96, 320, 160]  # MiB, cycled
    out, total, i = {}, 0, 0
    while total < want:
        mib = min(big[i % len(big)], max(1, (want - total) >> 20))
        cols = 4096
        rows = max(1, (mib << 20) // (cols * 2))
        raw = torch.randint(0, 256, (rows * cols * 2,), dtype=torch.uint8, device="cuda", generator=g)
        out[f"layers.{i:03d}.weight"] = raw.view(torch.bfloat16).view(rows, cols)
        total += rows * cols * 2
        for j in range(4):  # small tensors between the large ones, as norms and biases are
            n = 1024 << (2 * j)  # f32: 4 KiB, 16 KiB, 64 KiB, 256 KiB
            raw = torch.randint(0, 256, (n * 4,), dtype=torch.uint8, device="cuda", generator=g)
            out[f"layers.{i:03d}.small.{j}"] = raw.view(torch.float32)
            total += n * 4
        i += 1
    torch.cuda.synchronize()
    return out


def same_bytes(a, b):
    """Equal dtype, shape and bytes: random bf16 bytes hold NaNs, which torch.equal calls unequal."""
    import torch

    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def check_file(path, tensors, want_sha=None):
    """Every tensor of the file on the GPU equal in bytes to the source; optionally the sha256."""
    import torch
    from safetensors.torch import load_file

    got = load_file(path, device="cuda")
    if sorted(got) != sorted(tensors):
        return f"{path}: names differ"
    for name, t in tensors.items():
        a, b = got[name], t
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {name}: {a.dtype} {tuple(a.shape)}, saved {b.dtype} {tuple(b.shape)}"
        if not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)):
            return f"{path}: {name}: the bytes differ"
    del got
    if want_sha is not None:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(64 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != want_sha:
            return f"{path}: sha256 {h.hexdigest()}, the raw bytes' {want_sha}"
    return None


def raw_put(s3, bucket, key, data, part, streams):
    """data (a memoryview) as one multipart upload: parts of `part` bytes, `streams` at a time."""
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)
    uid = up["UploadId"]
    offs = list(range(0, len(data), part))

    def send(i):
        off = offs[i]
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=i + 1,
                           Body=bytes(data[off:off + part]))
        return {"PartNumber": i + 1, "ETag": r["ETag"]}

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=streams) as pool:
            parts = list(pool.map(send, range(len(offs))))
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={"Parts": parts})
    except BaseException:
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mount", required=True, help="an s3gdsfs mount with --allow-writes, its daemon with CUDA")
    ap.add_argument("--endpoint", required=True, help="the S3 endpoint behind the mount, for the raw uploads")
    ap.add_argument("--bucket", required=True, help="the bucket the mount shows (for the raw uploads)")
    ap.add_argument("--prefix", default="save-bench", help="directory of the mount (and key prefix) to write under")
    ap.add_argument("--gb", type=float, default=8.0, help="tensor bytes in all, in GB (default 8)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the three methods, in alternating order")
    ap.add_argument("--part-mib", type=int, default=16, help="raw upload part size, MiB (the daemon's --write-part-size)")
    ap.add_argument("--streams", type=int, default=16, help="raw upload parts at once (the daemon's --write-parts)")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="which of " + ",".join(METHODS) + " to run")
    ap.add_argument("--local-dir", default="/tmp", help="where torchsave writes its file before the upload")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--sha256", action="store_true", help="also compare each file's sha256 with the raw bytes'")
    ap.add_argument("--keep", action="store_true", help="leave the files (default: removed after their check; kept, they hold 3 x rounds x gb GB of the store)")
    ap.add_argument("--json", help="where to write the summary")
    a = ap.parse_args()
    methods = [m for m in a.methods.split(",") if m]
    if "s3torch" in methods:
        try:
            import s3torchconnector  # noqa: F401
        except ImportError:
            print("save_bench: s3torchconnector is not installed: its method is left out", file=sys.stderr)
            methods.remove("s3torch")
    for m in methods:
        if m not in METHODS:
            ap.error(f"--methods: {m!r} is not one of {', '.join(METHODS)}")

    import torch

    import s3gds
    from safetensors.torch import save, save_file

    if not torch.cuda.is_available():
        sys.exit("save_bench: torch sees no CUDA device")
    caps = s3gds.caps(a.mount)
    if caps.get("cuda_backend") != "cuda":
        sys.exit(f"save_bench: the daemon's cuda_backend is {caps.get('cuda_backend')!r}, not 'cuda'")
    directory = os.path.join(a.mount, a.prefix)
    os.makedirs(directory, exist_ok=True)

    tensors = make_tensors(a.gb, a.seed)
    data_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
    metadata = {"format": "pt"}
    t0 = time.perf_counter()
    host = save({k: v.cpu() for k, v in tensors.items()}, metadata=metadata)  # the raw method's bytes
    file_bytes = len(host)
    raw_sha = hashlib.sha256(host).hexdigest() if a.sha256 else None
    log({"kind": "setup", "tensors": len(tensors), "data_bytes": data_bytes, "file_bytes": file_bytes,
         "host_copy_seconds": round(time.perf_counter() - t0, 3), "gpu": torch.cuda.get_device_name(),
         "part_mib": a.part_mib, "streams": a.streams})
    if "raw" not in methods and "posix" not in methods:
        host = None

    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=a.endpoint,
                      config=Config(max_pool_connections=max(10, a.streams * 2), retries={"max_attempts": 3}))
    results = {m: [] for m in methods}
    failures = []
    for r in range(a.rounds):
        order = methods if r % 2 == 0 else list(reversed(methods))
        for m in order:
            name = f"{m}-{r}.safetensors"
            path = os.path.join(directory, name)
            extra = {}
            torch.cuda.synchronize()
            if m == "s3gds":
                before = s3gds.stats(a.mount).get("write_bytes_total", {}).get("gpu_http", 0)
                start = time.perf_counter()
                st = s3gds.save_safetensors(tensors, path, metadata)
                secs = time.perf_counter() - start
                moved = s3gds.stats(a.mount).get("write_bytes_total", {}).get("gpu_http", 0) - before
                extra = {"method": st.method, "ioctl_bytes": st.ioctl_bytes, "ioctl_calls": st.ioctl_calls,
                         "daemon_seconds": round(st.daemon_seconds, 3), "gpu_write_bytes": int(moved)}
                if st.method != "ioctl" or st.ioctl_bytes != data_bytes or int(moved) != data_bytes:
                    failures.append(f"{name}: not all tensor bytes went through the write ioctl: {extra}")
            elif m == "safetensors":
                start = time.perf_counter()
                save_file(tensors, path, metadata=metadata)
                secs = time.perf_counter() - start
            elif m == "posix":
                start = time.perf_counter()
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    view = memoryview(host)
                    for off in range(0, len(view), 64 << 20):
                        chunk = view[off:off + (64 << 20)]
                        while chunk:
                            chunk = chunk[os.write(fd, chunk):]
                finally:
                    os.close(fd)  # the upload ends here
                secs = time.perf_counter() - start
            elif m == "s3torch":
                from s3torchconnector import S3Checkpoint
                from s3torchconnector._s3client import S3ClientConfig

                ckpt = S3Checkpoint(region=os.environ.get("AWS_REGION", "us-east-1"), endpoint=a.endpoint,
                                    s3client_config=S3ClientConfig(force_path_style=True))
                start = time.perf_counter()
                with ckpt.writer(f"s3://{a.bucket}/{a.prefix}/{name}") as w:
                    torch.save(tensors, w)
                secs = time.perf_counter() - start
                extra = {"local_bytes": None}
            elif m == "torchsave":
                local = os.path.join(a.local_dir, f"save-bench-{os.getpid()}.pt")
                start = time.perf_counter()
                torch.save(tensors, local)  # torch copies each CUDA tensor to the host
                s3.upload_file(local, a.bucket, f"{a.prefix}/{name}")
                secs = time.perf_counter() - start
                extra = {"local_bytes": os.path.getsize(local)}
                os.remove(local)
            else:
                start = time.perf_counter()
                raw_put(s3, a.bucket, f"{a.prefix}/{name}", memoryview(host), a.part_mib << 20, a.streams)
                secs = time.perf_counter() - start
            size = os.path.getsize(path)
            if m in ("torchsave", "s3torch"):
                # Not a safetensors file: the object's size is checked, and torch.load of it.
                want = extra["local_bytes"] if m == "torchsave" else size
                problem = None if size == want else f"{path}: {size} bytes, not {want}"
                if problem is None:
                    got = torch.load(path, map_location="cuda")
                    if sorted(got) != sorted(tensors) or not all(same_bytes(got[k], tensors[k]) for k in tensors):
                        problem = f"{path}: torch.load of it differs from the tensors"
                    del got
                rec_bytes = size
            else:
                problem = None if size == file_bytes else f"{path}: {size} bytes, not {file_bytes}"
                problem = problem or check_file(path, tensors, raw_sha)
                rec_bytes = file_bytes
            if problem:
                failures.append(problem)
            rec = {"kind": m, "round": r, "bytes": rec_bytes, "seconds": round(secs, 3),
                   "gbps": round(rec_bytes / secs / 1e9, 3), "same": problem is None, **extra}
            log(rec)
            results[m].append(rec["gbps"])
            if not a.keep:
                os.remove(path)

    medians = {m: statistics.median(v) for m, v in results.items() if v}
    summary = {"kind": "summary", "gb": a.gb, "file_bytes": file_bytes, "rounds": a.rounds,
               "gpu": torch.cuda.get_device_name(), "part_mib": a.part_mib, "streams": a.streams,
               "gbps": results, "median_gbps": medians, "ratios": {}, "failures": failures}
    # The targets: s3gds >= 0.8x raw, >= 2x safetensors, >= 3x torchsave; posix >= 0.8x raw.
    for a_, b_ in (("s3gds", "raw"), ("s3gds", "safetensors"), ("s3gds", "torchsave"), ("s3gds", "s3torch"),
                   ("posix", "raw")):
        if medians.get(a_) and medians.get(b_):
            summary["ratios"][f"{a_}/{b_}"] = round(medians[a_] / medians[b_], 3)
    log(summary)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    if failures:
        for f in failures:
            print("FAIL", f, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
