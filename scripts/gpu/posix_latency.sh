#!/usr/bin/env bash
# Where a single reader's time goes: the latency of one pread(2) through the
# mount when the daemon already holds the block (a warm 256 MiB object, read
# with direct I/O, so every call goes to the daemon), for 4 KiB (the fixed
# cost of a request: the kernel's hand-off to the daemon and back) and 1 MiB
# (plus the copy of the bytes; into a page-aligned buffer and into a
# bytearray, and from one block read again and again, which stays in the
# CPU's cache), against the same preads of a copy of the object on /dev/shm
# (the page cache's copy alone), and the daemon's own time per request
# (s3gdsfs_posix_read_seconds). Needs .dev/gpu (make gpu-bundle).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-posix-latency}
N=${N:-4000}
source scripts/gpu/lib.sh
start_store
upload lat- 1 $((256 << 20)) 77 > "$OUT/objects.json"
mount_s3gdsfs latency.log
dd if="$MP/lat-0000" of=/dev/null bs=1M status=none # into the daemon's block cache
cp "$MP/lat-0000" "$ROOT/copy.bin"
metrics() { python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:9737/metrics').read().decode())" | grep -E '^s3gdsfs_posix_read_seconds_(sum|count)'; }
metrics > "$OUT/m0"
python3 - "$MP/lat-0000" "$ROOT/copy.bin" "$N" <<'PY' | tee "$OUT/latency.txt"
import mmap, os, sys, time, statistics
mount, copy, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
MiB = 1 << 20
def lat(path, size, aligned, same_block):
    # A page-aligned buffer (as dd and Go's allocator give) lets the kernel
    # send 1 MiB as one request; a bytearray is not page-aligned, so 1 MiB
    # spans 257 pages and goes as two.
    buf = mmap.mmap(-1, size) if aligned else bytearray(size)
    fd = os.open(path, os.O_RDONLY)
    ts = []
    for i in range(n):
        off = 0 if same_block else (i * 7919 * 4096) % (256 * MiB - size) // 4096 * 4096
        if size == MiB and not same_block:
            off = off // MiB * MiB
        t0 = time.perf_counter_ns()
        got = os.preadv(fd, [buf], off)
        ts.append(time.perf_counter_ns() - t0)
        assert got == size, got
    os.close(fd)
    ts.sort()
    return statistics.median(ts) / 1e3, ts[len(ts) // 10] / 1e3, ts[len(ts) * 9 // 10] / 1e3
for size, aligned, same, what in ((4096, True, False, "4 KiB, aligned buffer"),
                                  (MiB, True, False, "1 MiB, aligned buffer"),
                                  (MiB, False, False, "1 MiB, bytearray"),
                                  (MiB, True, True, "1 MiB, aligned, one block again and again")):
    for name, path in (("mount", mount), ("tmpfs", copy)):
        med, p10, p90 = lat(path, size, aligned, same)
        print(f"{name:5} pread {what:42}: median {med:8.1f} us (p10 {p10:7.1f}, p90 {p90:8.1f})  {size / med / 1e3:6.2f} GB/s")
PY
metrics > "$OUT/m1"
python3 - "$OUT/m0" "$OUT/m1" <<'PY' | tee -a "$OUT/latency.txt"
import sys
def parse(p): return {l.split()[0]: float(l.split()[1]) for l in open(p)}
a, b = parse(sys.argv[1]), parse(sys.argv[2])
s = b["s3gdsfs_posix_read_seconds_sum"] - a["s3gdsfs_posix_read_seconds_sum"]
c = b["s3gdsfs_posix_read_seconds_count"] - a["s3gdsfs_posix_read_seconds_count"]
print(f"daemon: {c:.0f} reads through the mount, {s / c * 1e6:.1f} us each in the daemon's handler (mean)")
PY
unmount_s3gdsfs
