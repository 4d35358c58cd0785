"""Draws the scaling curves of one or more scaling.py results beside the
figures of minio/minio-cpp#259 (27.84 / 5.58 / 3.66 / 1.91 GB/s at 1 / 2 / 4 / 8
processes), as a PNG.

  python3 plot_scaling.py OUT.png result.json [result.json ...]
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPORT = {1: 27.84, 2: 5.58, 4: 3.66, 8: 1.91}


def main():
    out, files = sys.argv[1], sys.argv[2:]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(list(REPORT), list(REPORT.values()), "k--o", label="minio-cpp#259: library per process (8x H200, 400 GbE RDMA)")
    raw_drawn = False
    for f in files:
        d = json.load(open(f))
        ns = [r["procs"] for r in d["runs"]]
        ax.plot(ns, [r["gbps"] for r in d["runs"]], "-o", label=f"s3gdsfs {d['label']}")
        # Every path of one run is measured against the same raw GETs.
        if not raw_drawn and all("raw" in r for r in d["runs"]):
            ax.plot(ns, [r["raw"]["gbps"] for r in d["runs"]], ":x", label="raw minio-go GETs, same total streams")
            raw_drawn = True
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8])
    ax.set_xticklabels(["1", "2", "4", "8"])
    ax.set_xlabel("processes (8 threads each)")
    ax.set_ylabel("aggregate GB/s")
    ax.set_title("Aggregate read throughput as processes are added")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
