#!/usr/bin/env bash
# The experiment behind push-ahead (vfs/push.go), without S3: one reader of a
# 1 GiB file that bench/pushexp serves from memory, with direct I/O, through
# the page cache with the kernel's readahead, and pushed into the page cache
# ahead of the reader by 1-8 goroutines, against the same reads from tmpfs.
# Needs .dev/gpu (make gpu-bundle). docs/results/push-experiment-h200.txt.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-push-experiment}
SIZE=${SIZE:-$((1 << 30))}
source scripts/gpu/lib.sh
PMP=$(mktemp -d)

# one MODE [pushexp flags]: mount, drop the page cache, read the file once
# (timed) and again for its md5, unmount.
one() {
  local mode=$1; shift
  "$BIN/pushexp" -mode "$mode" -size "$SIZE" "$@" "$PMP" 2> "$OUT/pushexp.log" &
  local pid=$!
  for _ in $(seq 100); do grep -q mounted "$OUT/pushexp.log" && break; sleep 0.1; done
  sync; echo 3 > /proc/sys/vm/drop_caches
  python3 - "$PMP/f" <<'PY'
import hashlib, mmap, os, resource, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
buf = mmap.mmap(-1, 1 << 20)
n = 0
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
while True:
    got = os.preadv(fd, [buf], n)
    if got == 0:
        break
    n += got
t = time.perf_counter() - t0
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
h = hashlib.md5()
os.lseek(fd, 0, 0)
while b := os.read(fd, 1 << 22):
    h.update(b)
print(f"read {n} bytes in {t:.3f} s: {n / t / 1e9:.3f} GB/s, reader CPU {cpu / (n / 1e9):.3f} s/GB, md5 {h.hexdigest()}")
PY
  kill -INT "$pid"; wait "$pid" || true
  grep -E "^(md5|pushed|read requests)" "$OUT/pushexp.log"
}

{
  for m in direct pagecache; do echo "== $m"; one $m; done
  for w in 1 2 4 8; do echo "== push workers=$w"; one push -workers $w; done
  for a in 32 128; do echo "== push workers=4 ahead=${a}MiB"; one push -workers 4 -ahead $((a << 20)); done
  echo "== push workers=4 readahead 0"; one push -workers 4 -readahead 0
  echo "== tmpfs reference"
  mkdir -p "$ROOT"; head -c "$SIZE" /dev/urandom > "$ROOT/ref.bin"
  python3 - "$ROOT/ref.bin" <<'PY'
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); buf = mmap.mmap(-1, 1 << 20); n = 0; t0 = time.perf_counter()
while got := os.preadv(fd, [buf], n):
    n += got
print(f"tmpfs {n / (time.perf_counter() - t0) / 1e9:.3f} GB/s")
PY
} | tee "$OUT/push-experiment.txt"
