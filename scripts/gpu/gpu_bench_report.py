"""Summarises a gpu_bench.sh run: one table per object size with each path's
GB/s by process count, its ratio to the raw GETs of the same run, the GPU
path against the same copies made without the daemon, and the checks (every
buffer's sha256, errors); writes summary.json, summary.md and gpu-bench.png
into the run's folder.

  python3 gpu_bench_report.py OUT
"""

import glob
import json
import os
import sys

THREADS = 8  # per process, as gpu_bench.sh runs them


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    out = sys.argv[1]
    runs = {os.path.basename(p)[:-5]: load(p) for p in sorted(glob.glob(os.path.join(out, "*.json")))
            if not os.path.basename(p).startswith(("big", "mid", "huge", "summary"))}
    rows, summary = [], {}
    for name, d in runs.items():
        if "runs" not in d:
            continue
        for r in d["runs"]:
            entry = {"gbps": r["gbps"], "raw_gbps": r.get("raw", {}).get("gbps"), "ratio": r.get("ratio_to_raw"),
                     "bad": r.get("buffers_not_matching", 0), "errors": len(r.get("errors", [])),
                     "share_deviation": r.get("max_share_deviation")}
            summary.setdefault(name, {})[str(r["procs"])] = entry
        for o in d.get("ops_runs") or []:
            raw = o.get("raw", {}).get("ops_per_s")
            summary.setdefault(name + " ops/s 64MiB", {})[str(o["procs"])] = {
                "ops_per_s": o["ops_per_s"], "raw_ops_per_s": raw,
                "ratio": o["ops_per_s"] / raw if raw else None,
                "bad": o.get("buffers_not_matching", 0), "errors": len(o.get("errors", []))}
    for p in sorted(glob.glob(os.path.join(out, "peer-*.json"))):
        for peer in load(p).get("peers", []):
            for r in peer.get("runs", []):
                summary.setdefault("peer " + peer["peer"], {})[str(r["procs"])] = {
                    "gbps": r["gbps"], "bad": r.get("buffers_not_matching", 0), "errors": len(r.get("errors", []))}
    for ring, what in (("cold", "256"), ("cold8", "8"), ("cold4", "4")):
        cold = glob.glob(os.path.join(out, ring, "*.json"))
        if cold:
            summary[f"raw into a ring of {what} MiB per worker"] = {"1": {"gbps": load(cold[0])["gbps"]}}
    # s3load landing the same objects in device memory through pinned slots, at each N: the
    # design's bound without the daemon, and the GPU path against it.
    bound = {}
    for p in glob.glob(os.path.join(out, "bound", "raw_big_*.json")):
        workers = int(os.path.basename(p)[len("raw_big_"):-len(".json")])
        raw_path = os.path.join(out, "raw", f"raw_big_{workers}.json")
        raw = load(raw_path)["gbps"] if os.path.exists(raw_path) else None
        g = load(p)["gbps"]
        bound[str(workers // THREADS)] = {"gbps": g, "raw_gbps": raw, "ratio": g / raw if raw else None}
    if bound:
        summary["the same copies without the daemon (s3load --device 0)"] = bound
        gpu = summary.get("gpu-http", {})
        summary["gpu-http / the copies without the daemon"] = {
            n: {"of_bound": gpu[n]["gbps"] / b["gbps"]} for n, b in bound.items() if n in gpu and b["gbps"]}
    variants = os.path.join(out, "variants.txt")
    if os.path.exists(variants):
        summary["_variants"] = open(variants).read().strip().splitlines()
    peaks = {}
    for p in glob.glob(os.path.join(out, "peak-*.txt")):
        peaks[os.path.basename(p)[5:-4]] = open(p).read().strip()
    summary["_peak_rss"] = peaks

    ns = sorted({n for v in summary.values() if isinstance(v, dict) for n in v if n.isdigit()}, key=int)
    rows.append("| path | " + " | ".join(f"N={n}" for n in ns) + " |")
    rows.append("| --- |" + " --- |" * len(ns))
    for name, by in summary.items():
        if name.startswith("_"):
            continue
        cells = []
        for n in ns:
            e = by.get(n)
            if not e:
                cells.append("")
            elif "of_bound" in e:
                cells.append(f"{e['of_bound']:.2f}")
            elif "ops_per_s" in e:
                cells.append(f"{e['ops_per_s']:.1f}" + (f" ({e['ratio']:.2f}x)" if e.get("ratio") else "")
                             + (" BAD" if e["bad"] or e["errors"] else ""))
            else:
                cells.append(f"{e['gbps']:.2f}" + (f" ({e['ratio']:.2f}x)" if e.get("ratio") else "")
                             + (" BAD" if e.get("bad") or e.get("errors") else ""))
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    rows.append("")
    rows.extend(summary.get("_variants", []))
    rows.append("Peak RSS: " + "; ".join(f"{k}: {v}" for k, v in sorted(peaks.items())))
    md = "\n".join(rows)
    print(md)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, by in summary.items():
        if name.startswith("_") or "ops/s" in name:
            continue
        pts = [(int(n), e["gbps"]) for n, e in by.items() if n.isdigit() and "gbps" in e]
        if len(pts) > 1:
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", label=name)
    raw = summary.get("gpu-http", {})
    pts = sorted((int(n), e["raw_gbps"]) for n, e in raw.items() if e.get("raw_gbps"))
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "k:x", label="raw minio-go GETs, same streams")
    ax.set_xlabel("processes (8 threads each)")
    ax.set_ylabel("GB/s into device memory")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    fig.savefig(os.path.join(out, "gpu-bench.png"), dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main()
