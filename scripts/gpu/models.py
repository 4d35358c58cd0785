"""How the programs that load models read one checkpoint of the mount, on the GPU machine.

  models.py ioctl --path P --local L --chunk-mib N     one thread, GPU-read ioctls in order
  models.py preads --path P --local L --threads T --chunk-mib N
                                                       T threads of preads into pinned memory
  models.py loadfile --path P --local L                safetensors.torch.load_file(device="cuda")
  models.py loadcpu --path P --local L                 load_file(path) onto the CPU, then each tensor
                                                       .to("cuda") (load_state_dict, then .cuda())
  models.py load --path P --local L                    s3gds.load_safetensors(device="cuda")
  models.py kvikio --path P --local L                  kvikio.CuFile(path).pread at its defaults
  models.py gds --path P --local L                     torch.cuda.gds.GdsFile(path).load_storage
  models.py pretrained --path DIR --local DIR          transformers' from_pretrained(device_map="cuda")
  models.py remote --path s3://BUCKET/KEY --local L --endpoint URL
                                                       kvikio.RemoteFile from S3 (a peer), into device memory
  models.py genmodel --out DIR --gb N --shards S       a Llama-shaped model directory of about N GB

Each prints one JSON line: the figure (GB/s of the file's bytes, the wall time of the reads alone)
and whether every byte equals the local copy's.
"""
import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))


def shards_of(index):
    """The shard files a *.index.json names, beside it."""
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    return [os.path.join(os.path.dirname(index), s) for s in sorted(set(weight_map.values()))]


def local_size(a):
    """The size of the local copy (of all its shards, for an index or a model directory), or of the
    file itself where --local is "pattern" (fuseread's file)."""
    if os.path.isdir(a.local):
        return sum(os.path.getsize(os.path.join(a.local, f)) for f in os.listdir(a.local) if f.endswith(".safetensors"))
    if a.local == "pattern":
        return os.path.getsize(a.path)
    if a.local.endswith(".index.json"):
        return sum(os.path.getsize(p) for p in shards_of(a.local))
    return os.path.getsize(a.local)


def local_tensors(a):
    """The local copy's tensors on the GPU, every shard's for an index."""
    from safetensors.torch import load_file
    if not a.local.endswith(".index.json"):
        return load_file(a.local, device="cuda")
    out = {}
    for p in shards_of(a.local):
        out.update(load_file(p, device="cuda"))
    return out


def host_ref(a, n):
    """The local copy's bytes in host memory; for "pattern", byte i is i*7 mod 256 (bench/fuseread)."""
    import torch
    if a.local == "pattern":  # i*7 mod 256 repeats every 256 bytes
        tile = ((torch.arange(256, dtype=torch.int64) * 7) & 255).to(torch.uint8)
        return tile.repeat(n // 256 + 1)[:n]
    return torch.from_file(a.local, size=n, dtype=torch.uint8)


_HZ = os.sysconf("SC_CLK_TCK")
_cpu = {}


def cpu_snapshot():
    """CPU seconds so far: the machine's busy and idle time (/proc/stat), this process's, and those
    of the processes CPU_PIDS names ("name=pid ...": the daemon, the server)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    snap = {"busy": (sum(v) - v[3] - v[4]) / _HZ, "idle": (v[3] + v[4]) / _HZ, "reader": sum(os.times()[:2])}
    for item in os.environ.get("CPU_PIDS", "").split():
        name, _, pid = item.partition("=")
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            snap[name] = (int(st[11]) + int(st[12])) / _HZ  # utime, stime
        except (OSError, ValueError, IndexError):
            pass
    return snap


def start_clock():
    _cpu["start"] = cpu_snapshot()
    return time.perf_counter()


def stop_clock(t0):
    """The seconds since start_clock, and the CPU seconds each part of the machine spent meanwhile
    (emit reports them)."""
    secs = time.perf_counter() - t0
    end, start = cpu_snapshot(), _cpu.pop("start", {})
    _cpu["delta"] = {f"{k}_s": round(end[k] - start[k], 3) for k in end if k in start}
    return secs


def emit(kind, a, secs, ok, **extra):
    n = local_size(a)
    rec = {"kind": a.label or kind, "path": a.path, "bytes": n, "seconds": round(secs, 4),
           "gbps": round(n / secs / 1e9, 3), "same": ok, **extra}
    if "delta" in _cpu:
        rec["cpu"] = _cpu.pop("delta")
    if a.variant:
        rec["variant"] = a.variant
    print(json.dumps(rec), flush=True)


def device_ref(a):
    import torch
    n = os.path.getsize(a.local)
    return torch.from_file(a.local, size=n, dtype=torch.uint8).cuda()


def ioctl(a):
    import torch
    import s3gds
    n = os.path.getsize(a.local)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    chunk = a.chunk_mib << 20
    fd = os.open(a.path, os.O_RDONLY)
    try:
        torch.cuda.synchronize()
        t0 = start_clock()
        for off in range(0, n, chunk):
            s3gds.read_into(dst, a.path, off, min(chunk, n - off), fd=fd, dst_offset=off)
        torch.cuda.synchronize()
        secs = stop_clock(t0)
    finally:
        os.close(fd)
    emit("ioctl", a, secs, bool(torch.equal(dst, device_ref(a))), chunk_mib=a.chunk_mib)


def preads(a):
    import torch
    n = local_size(a)
    buf = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    mv = memoryview(buf.numpy())
    chunk = a.chunk_mib << 20
    offs = list(range(0, n, chunk))
    lock = threading.Lock()
    errors = []
    fd = os.open(a.path, os.O_RDONLY)

    def work():
        while True:
            with lock:
                if not offs:
                    return
                off = offs.pop(0)
            want = min(chunk, n - off)
            got = 0
            while got < want:
                k = os.preadv(fd, [mv[off + got:off + want]], off + got)
                if k <= 0:
                    errors.append(f"short read at {off + got}")
                    return
                got += k

    t0 = start_clock()
    ts = [threading.Thread(target=work) for _ in range(a.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = stop_clock(t0)
    os.close(fd)
    ref = host_ref(a, n)
    emit("preads", a, secs, not errors and bool(torch.equal(buf, ref)), threads=a.threads, chunk_mib=a.chunk_mib,
         errors=errors[:3])


def same_tensors(got, ref):
    import torch
    return set(got) == set(ref) and all(got[k].dtype == ref[k].dtype and torch.equal(got[k], ref[k]) for k in ref)


def loadfile(a):
    import torch
    from safetensors.torch import load_file
    torch.cuda.synchronize()
    t0 = start_clock()
    got = load_file(a.path, device="cuda")
    torch.cuda.synchronize()
    secs = stop_clock(t0)
    emit("load_file", a, secs, same_tensors(got, load_file(a.local, device="cuda")))


def loadcpu(a):
    import torch
    from safetensors.torch import load_file
    torch.cuda.synchronize()
    t0 = start_clock()
    # The tensors map the file; the copies to the device fault it in,
    # tensor by tensor, after load_file has touched each one's first page.
    got = {k: v.to("cuda") for k, v in load_file(a.path).items()}
    torch.cuda.synchronize()
    secs = stop_clock(t0)
    emit("load_file_cpu", a, secs, same_tensors(got, load_file(a.local, device="cuda")))


def load(a):
    import torch
    import s3gds
    from safetensors.torch import load_file
    torch.cuda.synchronize()
    t0 = start_clock()
    got = s3gds.load_safetensors(a.path, device="cuda")
    torch.cuda.synchronize()
    secs = stop_clock(t0)
    emit("load_safetensors", a, secs, same_tensors(got, local_tensors(a)))


def kvikio_pread(a):
    import cupy
    import kvikio
    import kvikio.defaults
    import torch
    n = os.path.getsize(a.local)
    dst = cupy.empty(n, dtype=cupy.uint8)
    cupy.cuda.runtime.deviceSynchronize()
    t0 = start_clock()
    with kvikio.CuFile(a.path, "r") as f:
        got = f.pread(dst).get()
    cupy.cuda.runtime.deviceSynchronize()
    secs = stop_clock(t0)
    ref = device_ref(a)
    ok = got == n and bool(torch.equal(torch.as_tensor(dst, device="cuda"), ref))
    emit("kvikio", a, secs, ok, compat=str(kvikio.defaults.get("compat_mode")),
         threads=kvikio.defaults.get("num_threads"), task_size=kvikio.defaults.get("task_size"))


def gds(a):
    import torch
    n = os.path.getsize(a.local)
    storage = torch.empty(n, dtype=torch.uint8, device="cuda").untyped_storage()
    f = torch.cuda.gds.GdsFile(a.path, os.O_RDONLY)
    torch.cuda.synchronize()
    t0 = start_clock()
    f.load_storage(storage, 0)
    torch.cuda.synchronize()
    secs = stop_clock(t0)
    got = torch.empty(0, dtype=torch.uint8, device="cuda").set_(storage)
    emit("gds", a, secs, bool(torch.equal(got, device_ref(a))))


def pretrained(a):
    """transformers' from_pretrained of the model directory onto the GPU, every parameter compared
    with the local directory's."""
    import torch
    from transformers import AutoModelForCausalLM
    try:
        import accelerate  # noqa: F401  (device_map needs it)
        kw = {"device_map": "cuda"}
    except ImportError:
        kw = {}

    def load(path):
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16, **kw)
        return m if kw else m.to("cuda")

    torch.cuda.synchronize()
    t0 = start_clock()
    got = load(a.path)
    torch.cuda.synchronize()
    secs = stop_clock(t0)
    if os.path.realpath(a.path) == os.path.realpath(a.local):
        ok = True  # the reference itself
    else:
        ref = load(a.local)
        ok = same_tensors(got.state_dict(), ref.state_dict())
        del ref
    emit("from_pretrained", a, secs, ok, device_map=bool(kw))


def remote(a):
    """kvikio's RemoteFile.open_s3 read of the object straight into device memory, at kvikio's
    defaults: a peer that reads S3 without the mount."""
    import cupy
    import kvikio
    import torch
    bucket, _, key = a.path.removeprefix("s3://").partition("/")
    n = os.path.getsize(a.local)
    dst = cupy.empty(n, dtype=cupy.uint8)
    f = kvikio.RemoteFile.open_s3(bucket, key, nbytes=n, aws_region_name=os.environ.get("AWS_REGION", "us-east-1"),
                                  aws_endpoint_url=a.endpoint)
    cupy.cuda.runtime.deviceSynchronize()
    t0 = start_clock()
    got = f.read(dst)
    cupy.cuda.runtime.deviceSynchronize()
    secs = stop_clock(t0)
    ok = got == n and bool(torch.equal(torch.as_tensor(dst, device="cuda"), device_ref(a)))
    emit("kvikio_remote", a, secs, ok, threads=kvikio.defaults.get("num_threads"))


def genmodel(a):
    """A Llama-shaped model directory of about --gb GB of bf16 weights in --shards safetensors shards
    with their index, random weights, as save_pretrained writes one."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, LlamaConfig
    hidden, inter, vocab = 3072, 8192, 32000
    per_layer = 2 * (2 * hidden * hidden + 2 * hidden * 1024 + 3 * hidden * inter) + 2 * hidden
    layers = max(1, int((a.gb * 1e9 - 4 * vocab * hidden) / per_layer))
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=24,
                      num_key_value_heads=8, vocab_size=vocab, tie_word_embeddings=False, torch_dtype="bfloat16")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in AutoModelForCausalLM.from_config(cfg).state_dict().items()}
    os.makedirs(a.out, exist_ok=True)
    cfg.save_pretrained(a.out)
    names = list(shapes)
    total = sum(s.numel() * 2 for s in shapes.values())
    per_shard, shard, size, weight_map = total / a.shards, [], 0, {}
    files = []

    def flush():
        name = f"model-{len(files) + 1:05d}-of-{a.shards:05d}.safetensors"
        g = torch.Generator(device="cuda").manual_seed(len(files))
        save_file({k: (torch.randn(shapes[k], generator=g, device="cuda", dtype=torch.float32) * 0.02)
                   .to(torch.bfloat16).cpu() for k in shard}, os.path.join(a.out, name), metadata={"format": "pt"})
        files.append(name)
        weight_map.update({k: name for k in shard})

    for k in names:
        shard.append(k)
        size += shapes[k].numel() * 2
        if size >= per_shard * (len(files) + 1) and len(files) < a.shards - 1:
            flush()
            shard = []
    if shard:
        flush()
    if len(files) != a.shards:  # name the shards by how many there are
        for i, f in enumerate(files):
            new = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
            os.rename(os.path.join(a.out, f), os.path.join(a.out, new))
            weight_map = {k: (new if v == f else v) for k, v in weight_map.items()}
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    print(json.dumps({"kind": "genmodel", "out": a.out, "bytes": total, "layers": layers, "shards": len(files)}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("genmodel")
    g.add_argument("--out", required=True)
    g.add_argument("--gb", type=float, default=6)
    g.add_argument("--shards", type=int, default=4)
    cmds = {"ioctl": ioctl, "preads": preads, "loadfile": loadfile, "loadcpu": loadcpu, "load": load, "kvikio": kvikio_pread, "gds": gds,
            "pretrained": pretrained, "remote": remote}
    for name in cmds:
        p = sub.add_parser(name)
        p.add_argument("--path", required=True)
        p.add_argument("--local", required=True, help='the local copy to compare with; "pattern": bench/fuseread\'s bytes (preads only)')
        p.add_argument("--chunk-mib", type=int, default=4)
        p.add_argument("--threads", type=int, default=16)
        p.add_argument("--label", help="the name the figure is printed under (default: the command's)")
        p.add_argument("--variant", help="the build or settings measured, recorded with the figure")
        p.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:7070"), help="S3 endpoint (remote)")
    a = ap.parse_args()
    if a.cmd == "genmodel":
        genmodel(a)
        return
    cmds[a.cmd](a)


if __name__ == "__main__":
    main()
