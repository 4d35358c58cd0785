"""Host-to-device copies from a cold pinned buffer at a set rate, for SECONDS:
the device copies of the GPU path without its GETs, run beside raw GETs to
measure what the copies alone cost them (scripts/gpu/copy_bound.sh). The
buffer is larger than the host's caches and no CPU touches it, so every copy
reads memory. Waits block (no spinning) and pacing sleeps, so the load takes
next to no CPU. Prints one JSON line: the rate asked and the rate reached.

  python3 copy_load.py --rate GBPS --seconds S [--buffer-mib 1024] [--chunk-mib 4] [--ready FILE]
"""

import argparse, json, sys, time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, required=True, help="GB/s to copy; 0: as fast as the copies go")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--buffer-mib", type=int, default=1024)
    ap.add_argument("--chunk-mib", type=int, default=4)
    ap.add_argument("--ready", help="a file made once the copies have begun")
    a = ap.parse_args()
    if a.rate < 0 or a.seconds <= 0 or a.chunk_mib <= 0 or a.buffer_mib < a.chunk_mib:
        sys.exit("copy_load: --rate >= 0, --seconds > 0 and --buffer-mib >= --chunk-mib > 0")
    chunk = a.chunk_mib << 20
    n = a.buffer_mib // a.chunk_mib
    host = torch.empty(n * chunk, dtype=torch.uint8).pin_memory()
    host.fill_(1)
    dev = torch.empty(16 * chunk, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    batch = 16  # chunks per wait: 64 MiB at the default chunk
    moved, i = 0, 0
    start = time.monotonic()
    while time.monotonic() - start < a.seconds:
        t0 = time.monotonic()
        with torch.cuda.stream(stream):
            for j in range(batch):
                k = (i + j) % n
                dev[j * chunk:(j + 1) * chunk].copy_(host[k * chunk:(k + 1) * chunk], non_blocking=True)
            done = torch.cuda.Event(blocking=True)
            done.record(stream)
        done.synchronize()
        if i == 0 and a.ready:
            open(a.ready, "w").close()
        i += batch
        moved += batch * chunk
        if a.rate > 0:
            # Sleep off what the batch took less than its share at the rate.
            time.sleep(max(0.0, batch * chunk / (a.rate * 1e9) - (time.monotonic() - t0)))
    secs = time.monotonic() - start
    print(json.dumps({"rate_asked_gbps": a.rate, "gbps": moved / secs / 1e9, "seconds": secs}))


if __name__ == "__main__":
    main()
