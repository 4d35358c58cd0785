"""Draws one or more scaling.py results as a PNG: aggregate GB/s by process
count for each path and for raw GETs with the same streams, and each path's
ratio to those GETs. The title names what was read and where; the host is
the one this runs on unless --where says otherwise.

  python3 plot_scaling.py [--where TEXT] OUT.png result.json [result.json ...]
"""

import argparse
import json
import os
import subprocess

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# scaling.py's --path and gpu_bench.sh's / run_scaling.sh's labels, in words.
PATHS = {
    "posix": "s3gdsfs, POSIX reads through the mount",
    "posix-copy": "s3gdsfs, POSIX reads into pinned memory + device copy",
    "gpu-http": "s3gdsfs, GPU reads over HTTP",
    "gpu-rdma": "s3gdsfs, GPU reads over loopback RDMA",
}
RAW = "raw GETs (minio-go), same streams"


def series_name(d):
    return PATHS.get(d["label"]) or PATHS.get(d.get("path")) or f"s3gdsfs, {d['label']}"


def host():
    """This host in a few words: CPU model and count, and GPUs if any."""
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].split("@")[0].strip()
                break
    except OSError:
        pass
    n = len(os.sched_getaffinity(0))
    words = f"{n} cores" + (f" ({model})" if model else "")
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.split("\n")
        gpus = [g.strip() for g in gpus if g.strip()]
        if gpus:
            words += f", {len(gpus)}x {gpus[0]}"
    except (OSError, subprocess.SubprocessError):
        pass
    return words


def size_words(n):
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n / 1e6:.0f} MB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--where", help="the machine, for the title (default: this host)")
    ap.add_argument("out")
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()
    results = [json.load(open(f)) for f in args.results]
    threads = results[0]["runs"][0]["threads"]
    secs = results[0]["runs"][0]["seconds"]
    objs = size_words(results[0]["object_bytes"])
    paths = {d.get("path") for d in results}
    kind = {"posix": "POSIX reads through one s3gdsfs mount", "gpu": "GPU reads through one s3gdsfs mount"}.get(
        paths.pop() if len(paths) == 1 else None, "Reads through s3gdsfs")
    fig, (ax, rx) = plt.subplots(1, 2, figsize=(11, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    fig.suptitle(f"{kind}: N processes x {threads} threads reading whole {objs} objects, {secs:.0f} s per point\n"
                 f"{args.where or host()}; versitygw on loopback",
                 fontsize=10)
    ns = sorted({r["procs"] for d in results for r in d["runs"]})
    raw = None
    for d in results:
        pts = sorted((r["procs"], r["gbps"], r.get("raw", {}).get("gbps")) for r in d["runs"])
        name = series_name(d)
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", label=name)
        ratio = [(p[0], p[1] / p[2]) for p in pts if p[2]]
        rx.plot([p[0] for p in ratio], [p[1] for p in ratio], "-o", color=line.get_color())
        # Every path of one run is measured against the same raw GETs: drawn once, after the paths.
        if raw is None and all(p[2] for p in pts):
            raw = [(p[0], p[2]) for p in pts]
    if raw:
        ax.plot([p[0] for p in raw], [p[1] for p in raw], "k:x", label=RAW)
    ax.set_ylabel("aggregate GB/s (10^9 bytes/s)")
    ax.set_title("Throughput", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    rx.axhline(1.0, color="k", linestyle=":", linewidth=1)
    rx.set_ylabel(f"ratio to {RAW}")
    rx.set_title("Against raw GETs (1.0 = as fast)", fontsize=10)
    rx.set_ylim(0, max(1.2, rx.get_ylim()[1]))
    for a in (ax, rx):
        a.set_xscale("log", base=2)
        a.set_xticks(ns)
        a.set_xticklabels([str(n) for n in ns])
        a.minorticks_off()
        a.set_xlabel(f"processes ({threads} threads each)")
        a.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
