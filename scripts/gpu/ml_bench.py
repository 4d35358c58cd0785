"""The programs people run, on the GPU machine, against the same server in one run.

  ml_bench.py gen --out FILE --gb 8            a safetensors checkpoint of random tensors
  ml_bench.py upload --endpoint EP --bucket B --key K --file FILE
  ml_bench.py checkpoint --mount MP --key K --local FILE --endpoint EP --bucket B --out JSON
      s3gds.load_safetensors from the mount against safetensors.torch.load_file of the same
      path on the mount and Run:ai's model streamer from the server, every tensor compared with
      load_file of the local copy
  ml_bench.py gds --mount MP --key K --local FILE --out JSON
      torch.cuda.gds.GdsFile(...).load_storage of the file on the mount (run it with and
      without LD_PRELOAD of libs3gdsfs_cufile.so): bytes compared with the local copy, and the
      daemon's counters before and after

Prints one line per measurement and writes JSON.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))


def gen(a):
    import torch
    from safetensors.torch import save_file
    g = torch.Generator(device="cuda").manual_seed(7)
    target, tensors, i = int(a.gb * 1e9), {}, 0
    dtypes = [torch.bfloat16, torch.float32, torch.float16, torch.int8]
    total = 0
    while total < target:
        dt = dtypes[i % len(dtypes)]
        rows = [4096, 11008, 1024, 4099][i % 4]  # one row count that is no power of two
        t = torch.randint(-100, 100, (rows, 4096), generator=g, device="cuda").to(dt)
        tensors[f"layers.{i}.w"] = t.cpu()
        total += t.numel() * t.element_size()
        i += 1
    if a.shards <= 1:
        save_file(tensors, a.out, metadata={"format": "pt"})
        print(f"gen: {len(tensors)} tensors, {os.path.getsize(a.out)} bytes", flush=True)
        return
    # A sharded checkpoint as transformers writes one: a directory of
    # model-0000i-of-0000N.safetensors and model.safetensors.index.json naming each tensor's shard.
    os.makedirs(a.out, exist_ok=True)
    groups, acc = [[]], 0  # tensors in order, a shard closed once it holds its share of the bytes
    for n, t in tensors.items():
        if acc >= (len(groups)) * total / a.shards and len(groups) < a.shards:
            groups.append([])
        groups[-1].append(n)
        acc += t.numel() * t.element_size()
    weight_map, total_bytes = {}, 0
    for k, part in enumerate(groups):
        shard = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(a.out, shard), metadata={"format": "pt"})
        total_bytes += os.path.getsize(os.path.join(a.out, shard))
        weight_map.update({n: shard for n in part})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    print(f"gen: {len(tensors)} tensors in {len(groups)} shards, {total_bytes} bytes", flush=True)


def upload(a):
    import boto3
    from boto3.s3.transfer import TransferConfig
    s3 = boto3.client("s3", endpoint_url=a.endpoint)
    t0 = time.time()
    s3.upload_file(a.file, a.bucket, a.key, Config=TransferConfig(multipart_chunksize=64 << 20, max_concurrency=16))
    print(f"upload: {a.key} {os.path.getsize(a.file)} bytes in {time.time() - t0:.1f} s", flush=True)


def same(got, ref):
    import torch
    if set(got) != set(ref):
        return f"names differ: {sorted(set(got) ^ set(ref))[:5]}"
    for k, r in ref.items():
        g = got[k]
        if g.dtype != r.dtype or g.shape != r.shape or g.device != r.device:
            return f"{k}: {g.dtype} {tuple(g.shape)} {g.device} against {r.dtype} {tuple(r.shape)} {r.device}"
        if not torch.equal(g.view(torch.uint8) if g.dim() else g, r.view(torch.uint8) if r.dim() else r):
            return f"{k}: bytes differ"
    return None


def timed(name, nbytes, fn, ref, results):
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        out = fn()
        torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        results.append({"name": name, "error": repr(e)[:2000]})
        print(f"{name}: failed: {e!r}"[:2000], flush=True)
        return
    bad = same(out, ref) if ref is not None else None
    r = {"name": name, "seconds": secs, "gbps": nbytes / secs / 1e9, "mismatch": bad}
    results.append(r)
    print(f"{name}: {secs:.2f} s, {r['gbps']:.2f} GB/s, {'MISMATCH ' + bad if bad else 'every tensor equal'}", flush=True)
    del out
    torch.cuda.empty_cache()


def checkpoint(a):
    import torch
    import s3gds
    from safetensors.torch import load_file
    path = os.path.join(a.mount, a.key)
    nbytes = os.path.getsize(a.local)
    ref = load_file(a.local, device="cuda")
    results = []

    def ours():
        t, st = s3gds.load_safetensors(path, device="cuda", return_stats=True)
        print(f"  load_safetensors: method {st.method} ({st.reason}), {st.data_reads} reads, "
              f"transports {st.transports}, {len(st.copied)} copied for alignment", flush=True)
        return t

    def runai():
        from runai_model_streamer import SafetensorsStreamer
        out = {}
        with SafetensorsStreamer() as s:
            s.stream_file(f"s3://{a.bucket}/{a.key}", device="cuda")
            for name, t in s.get_tensors():
                out[name] = t.to("cuda")
        return out

    from s3gds import checkpoint as ckpt
    readers = [int(x) for x in a.readers.split(",") if x] or [ckpt.READERS]
    for rnd in range(a.rounds):
        for n in readers:
            ckpt.READERS = n
            timed(f"load_safetensors readers={n}[{rnd}]", nbytes, ours, ref, results)
        if a.others:
            timed(f"safetensors.load_file(mount)[{rnd}]", nbytes, lambda: load_file(path, device="cuda"), ref, results)
            timed(f"runai_model_streamer[{rnd}]", nbytes, runai, ref, results)
    json.dump({"bytes": nbytes, "results": results}, open(a.out, "w"), indent=1)


def gds(a):
    import hashlib
    import torch
    import s3gds
    path = os.path.join(a.mount, a.key)
    n = os.path.getsize(a.local)
    preloaded = "libs3gdsfs_cufile" in os.environ.get("LD_PRELOAD", "")
    ref = torch.from_file(a.local, size=n, dtype=torch.uint8).cuda()
    before = s3gds.stats(path)  # the file's own counters
    storage = torch.empty(n, dtype=torch.uint8, device="cuda").untyped_storage()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    err = None
    try:
        f = torch.cuda.gds.GdsFile(path, os.O_RDONLY)
        f.load_storage(storage, 0)
        torch.cuda.synchronize()
        del f
    except Exception as e:  # noqa: BLE001
        err = repr(e)[:2000]
    secs = time.perf_counter() - t0
    after = s3gds.stats(path)
    got = torch.empty(0, dtype=torch.uint8, device="cuda").set_(storage, 0, (n,))
    equal = err is None and bool(torch.equal(got, ref))
    b, c = before.get("counters", before), after.get("counters", after)
    delta = {k: v - b.get(k, 0) for k, v in c.items() if isinstance(v, (int, float))}
    gpu, posix = delta.get("gpu_http_bytes", 0) + delta.get("gpu_rdma_bytes", 0), delta.get("posix_read_bytes", 0)
    r = {"preloaded": preloaded, "bytes": n, "seconds": secs, "gbps": n / secs / 1e9, "error": err,
         "equal": equal, "gpu_read_bytes": gpu, "posix_read_bytes": posix, "counters": delta}
    print(f"GdsFile.load_storage {'with' if preloaded else 'without'} the library: {secs:.2f} s, "
          f"{n / secs / 1e9:.2f} GB/s, {'equal' if equal else 'NOT EQUAL'}, daemon GPU bytes {gpu}, "
          f"posix bytes {posix}, error {err}", flush=True)
    json.dump(r, open(a.out, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen"); p.add_argument("--out", required=True); p.add_argument("--gb", type=float, default=8)
    p.add_argument("--shards", type=int, default=1, help="above 1: --out is a directory of that many shards and their index")
    p = sub.add_parser("upload")
    for f in ("--endpoint", "--bucket", "--key", "--file"):
        p.add_argument(f, required=True)
    p = sub.add_parser("checkpoint")
    for f in ("--mount", "--key", "--local", "--endpoint", "--bucket", "--out"):
        p.add_argument(f, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--readers", default="", help="s3gds.checkpoint.READERS values to try, e.g. 8,16")
    p.add_argument("--others", type=int, default=1, help="1: also load_file from the mount and the streamer")
    p = sub.add_parser("gds")
    for f in ("--mount", "--key", "--local", "--out"):
        p.add_argument(f, required=True)
    a = ap.parse_args()
    {"gen": gen, "upload": upload, "checkpoint": checkpoint, "gds": gds}[a.cmd](a)


if __name__ == "__main__":
    main()
