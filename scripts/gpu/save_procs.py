"""Processes saving checkpoint shards to the mount at once, on the GPU machine.

  save_procs.py --mount MP [--gb 8] [--procs 8] [--rounds 2] [--json OUT]

Each process makes its shard of random CUDA tensors (--gb / --procs GB), waits for the others,
and saves it with s3gds.save_safetensors to the mount (the write ioctl). The figure is the bytes
of all shards over the wall time from the common start to the last close. Rounds alternate one
process saving one shard alone and --procs processes saving one each, so that the aggregate of
many is compared with one in the same run (the issue's target: >= 1.0x). Every shard is read
back with safetensors.torch.load_file and compared byte for byte; exits non-zero if one differs.
"""
import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
sys.path.insert(0, HERE)


def child(i, shard_gb, path, seed, barrier, out):
    import torch

    import s3gds
    from save_bench import check_file, make_tensors

    tensors = make_tensors(shard_gb, seed + i)
    torch.cuda.synchronize()
    barrier.wait()
    start = time.time()
    st = s3gds.save_safetensors(tensors, path, {"format": "pt"})
    end = time.time()
    problem = check_file(path, tensors)
    out.put({"proc": i, "start": start, "end": end, "bytes": os.path.getsize(path), "method": st.method,
             "problem": problem})


def run(procs, shard_gb, directory, seed, tag):
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    paths = [os.path.join(directory, f"{tag}-shard{i}.safetensors") for i in range(procs)]
    ps = [ctx.Process(target=child, args=(i, shard_gb, paths[i], seed, barrier, out)) for i in range(procs)]
    for p in ps:
        p.start()
    recs = [out.get(timeout=1800) for _ in ps]
    for p in ps:
        p.join()
    for path in paths:
        os.remove(path)
    total = sum(r["bytes"] for r in recs)
    secs = max(r["end"] for r in recs) - min(r["start"] for r in recs)
    problems = [r["problem"] for r in recs if r["problem"]] + [f"proc {r['proc']}: method {r['method']}"
                                                             for r in recs if r["method"] != "ioctl"]
    return {"procs": procs, "bytes": total, "seconds": round(secs, 3), "gbps": round(total / secs / 1e9, 3),
            "per_proc_seconds": sorted(round(r["end"] - r["start"], 3) for r in recs), "problems": problems}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mount", required=True)
    ap.add_argument("--prefix", default="save-procs")
    ap.add_argument("--gb", type=float, default=8.0, help="all shards together, GB")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.procs < 2 or a.gb <= 0 or a.rounds < 1:
        ap.error("--procs at least 2, --gb above 0, --rounds at least 1")
    directory = os.path.join(a.mount, a.prefix)
    os.makedirs(directory, exist_ok=True)
    shard = a.gb / a.procs
    got = {1: [], a.procs: []}
    problems = []
    for r in range(a.rounds):
        for n in ((1, a.procs) if r % 2 == 0 else (a.procs, 1)):
            rec = run(n, shard, directory, a.seed, f"r{r}-n{n}")
            rec.update(kind="save_procs", round=r)
            print(json.dumps(rec), flush=True)
            got[n].append(rec["gbps"])
            problems += rec["problems"]
    med = {n: statistics.median(v) for n, v in got.items()}
    summary = {"kind": "summary", "gb": a.gb, "procs": a.procs, "gbps": {str(k): v for k, v in got.items()},
               "ratio": round(med[a.procs] / med[1], 3), "problems": problems}
    print(json.dumps(summary), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    if problems:
        sys.exit("save_procs: " + "; ".join(problems))


if __name__ == "__main__":
    main()
