"""Summarises a gpu_bench.sh run: one table per object size with each path's
GB/s by process count, its ratio to the raw GETs of the same run, the GPU
path against the same copies made without the daemon, and the checks (every
buffer's sha256, errors); writes summary.json, summary.md and gpu-bench.png
(one chart per object size, each path and its references by process count,
the host from host.txt in the title) into the run's folder.

  python3 gpu_bench_report.py OUT
"""

import glob
import json
import os
import sys

THREADS = 8  # per process, as gpu_bench.sh runs them
BOUND = "the same copies without the daemon (s3load --device 0)"
RAW = "raw GETs (minio-go), same streams"
# The runs' labels in words, for the plot.
PEERS = {"kvikio": "peer: kvikio RemoteFile into device memory",
         "s3torchconnector": "peer: s3torchconnector into pinned memory + device copy",
         "boto3": "peer: boto3 into pinned memory + device copy"}


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
        summary[BOUND] = bound
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
    plot(out, summary)


def object_size(out, manifest, default):
    try:
        n = load(os.path.join(out, manifest))["objects"][0]["size"]
    except (OSError, ValueError, KeyError, IndexError):
        return default
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n / 1e6:.0f} MB"


def host_words(out):
    """host.txt (gpu_bench.sh: nproc, then nvidia-smi's name, memory per GPU) in a few words."""
    try:
        lines = [line.strip() for line in open(os.path.join(out, "host.txt")) if line.strip()]
    except OSError:
        return "host not recorded"
    words = f"{lines[0]} cores" if lines and lines[0].isdigit() else "host"
    gpus = [line.split(",")[0] for line in lines[1:]]
    if gpus:
        words += f", {len(gpus)}x {gpus[0]}" if len(set(gpus)) == 1 else ", " + " + ".join(gpus)
    return words


def series(name, variants):
    """A summary row's name in words, or None for rows the plot leaves out."""
    if name == "gpu-http":
        return "s3gdsfs, GPU reads over HTTP"
    if name == "gpu-rdma":
        return "s3gdsfs, GPU reads over loopback RDMA"
    if name == "posix-copy":
        return "s3gdsfs, POSIX reads into pinned memory + device copy"
    if name == BOUND:
        return "the same GETs + device copies, without s3gdsfs"
    if name.startswith("peer "):
        return PEERS.get(name[5:], "peer: " + name[5:])
    if name.startswith("variant-"):
        i = int(name[8:]) - 1
        flags = variants[i].split(":", 1)[1].strip() if i < len(variants) else name
        return f"s3gdsfs over HTTP, {flags}"
    if name.startswith("gpu-http-") and name != "gpu-http-768":
        return f"s3gdsfs build {name[9:]}, GPU reads over HTTP"
    return None


def plot(out, summary):
    """gpu-bench.png: one chart per object size, only figures measured alike on each."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return

    def pts(by, key):
        return sorted((int(n), e[key]) for n, e in by.items() if n.isdigit() and e.get(key))

    big = object_size(out, "big.json", "256 MiB")
    variants = summary.get("_variants", [])
    charts = []  # (title, y label, [(label, points, style)])
    lines = [(series(name, variants), pts(by, "gbps"), "-o") for name, by in summary.items()
             if not name.startswith("_") and series(name, variants)]
    raw = pts(summary.get("gpu-http", {}), "raw_gbps")
    if raw:
        lines.append((RAW, raw, "k:x"))
    # The mount's paths first, then what they are measured against, then the other ways in.
    order = ("s3gdsfs,", "s3gdsfs over", "s3gdsfs build", "the same GETs", "raw GETs", "s3gdsfs, POSIX", "peer")
    lines = sorted((line for line in lines if line[1]),
                   key=lambda line: max(i for i, w in enumerate(order) if line[0].startswith(w)))
    if lines:
        charts.append((f"{big} objects", "GB/s into device memory (10^9 bytes/s)", lines))
    huge = summary.get("gpu-http-768", {})
    if pts(huge, "gbps"):
        charts.append((f"{object_size(out, 'huge.json', '768 MiB')} objects", "GB/s into device memory (10^9 bytes/s)",
                       [("s3gdsfs, GPU reads over HTTP", pts(huge, "gbps"), "-o"), (RAW, pts(huge, "raw_gbps"), "k:x")]))
    ops = summary.get("gpu-http ops/s 64MiB", {})
    if pts(ops, "ops_per_s"):
        charts.append((f"{object_size(out, 'mid.json', '64 MiB')} objects", "whole objects read per second",
                       [("s3gdsfs, GPU reads over HTTP", pts(ops, "ops_per_s"), "-o"),
                        (RAW, pts(ops, "raw_ops_per_s"), "k:x")]))
    if not charts:
        return
    widths = [2.2] + [1] * (len(charts) - 1)
    fig, axes = plt.subplots(1, len(charts), figsize=(6.5 + 3.5 * (len(charts) - 1), 5.5), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    fig.suptitle(f"GPU reads through one s3gdsfs mount: N processes x {THREADS} threads landing whole objects "
                 f"in device memory\n{host_words(out)}; versitygw on loopback", fontsize=10)
    for ax, (title, ylabel, drawn) in zip(axes[0], charts):
        ns = sorted({p[0] for _, ps, _ in drawn for p in ps})
        for label, ps, style in drawn:
            if ps:
                ax.plot([p[0] for p in ps], [p[1] for p in ps], style, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_xlabel(f"processes ({THREADS} threads each)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        # Below the chart, where it hides no point.
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.13), ncol=1 if len(drawn) < 4 else 2)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "gpu-bench.png"), dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main()
