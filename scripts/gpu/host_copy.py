"""The host's copy rate: THREADS threads each memmove their share of a GIB GiB source (warm,
touched once) into freshly mapped destination pages, cold (first touched by the copy, as a new
buffer is) and warm (touched before, as a reused buffer or the daemon's blocks are). Prints one
JSON line {"kind": "host_copy", "threads": T, "gbps": warm, "cold_gbps": cold}, the best of
ROUNDS rounds each. No dependencies.

  host_copy.py [--threads 16] [--gib 4] [--rounds 3]
"""
import argparse
import ctypes
import json
import mmap
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=16)
p.add_argument("--gib", type=float, default=4)
p.add_argument("--rounds", type=int, default=3)
a = p.parse_args()
n = int(a.gib * (1 << 30)) // (a.threads << 20) * (a.threads << 20)
src = mmap.mmap(-1, n)
src.write(b"\x5a" * (64 << 20) * (n // (64 << 20)))  # warm: every page touched
src_addr = ctypes.addressof(ctypes.c_char.from_buffer(src))
share = n // a.threads
best = {False: 0.0, True: 0.0}
for warm in [False, True] * a.rounds:
    dst = mmap.mmap(-1, n)
    dst_addr = ctypes.addressof(ctypes.c_char.from_buffer(dst))
    if warm:
        ctypes.memset(dst_addr, 1, n)
    piece = 64 << 20

    def copy(i):
        for off in range(i * share, (i + 1) * share, piece):
            ctypes.memmove(dst_addr + off, src_addr + off, min(piece, (i + 1) * share - off))

    ts = [threading.Thread(target=copy, args=(i,)) for i in range(a.threads)]
    t = time.perf_counter()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    best[warm] = max(best[warm], n / (time.perf_counter() - t) / 1e9)
    del dst_addr
    dst.close()
print(json.dumps({"kind": "host_copy", "threads": a.threads, "gbps": round(best[True], 2), "cold_gbps": round(best[False], 2)}))
