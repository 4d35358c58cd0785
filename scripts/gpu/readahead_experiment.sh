#!/usr/bin/env bash
# Without S3: one reader of a 1 GiB file that bench/pushexp serves from
# memory through the page cache, with the mount's readahead (its bdi's
# read_ahead_kb) at 1, 4, 16 and 64 MiB, against direct I/O and tmpfs.
# Asks whether the kernel's readahead, which sends several read requests at
# once, carries one reader past the rate of one direct-I/O request at a
# time. Needs .dev/gpu/pushexp.xz.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-readahead-experiment}
SIZE=${SIZE:-$((1 << 30))}
mkdir -p "$OUT"
BIN=$(mktemp -d)
xz -dc .dev/gpu/pushexp.xz > "$BIN/pushexp"; chmod +x "$BIN/pushexp"
PMP=$(mktemp -d)
one() { # one MODE RA_KB [pushexp flags]
  local mode=$1 ra=$2; shift 2
  "$BIN/pushexp" -mode "$mode" -size "$SIZE" -readahead $((64 << 20)) "$@" "$PMP" 2> "$OUT/pushexp.log" &
  local pid=$!
  for _ in $(seq 100); do grep -q mounted "$OUT/pushexp.log" && break; sleep 0.1; done
  bdi=/sys/class/bdi/$(stat -c '%Hd:%Ld' "$PMP")/read_ahead_kb
  echo "$ra" > "$bdi"
  sync; echo 3 > /proc/sys/vm/drop_caches
  local line
  line=$(python3 - "$PMP/f" "$mode ra=$(cat "$bdi")KiB" <<'PY'
import hashlib, mmap, os, resource, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); buf = mmap.mmap(-1, 1 << 20); n = 0
r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
while got := os.preadv(fd, [buf], n):
    n += got
t = time.perf_counter() - t0; r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
h = hashlib.md5(); os.lseek(fd, 0, 0)
while b := os.read(fd, 1 << 22):
    h.update(b)
print(f"{sys.argv[2]}: {n / t / 1e9:.3f} GB/s, reader CPU {cpu / (n / 1e9):.3f} s/GB, md5 {h.hexdigest()}")
PY
)
  echo "$line"
  kill -INT "$pid"; wait "$pid" || true
  grep -E "^(md5|read requests)" "$OUT/pushexp.log" | tr '\n' ' '; echo
  # The bytes read are the bytes served.
  [ "${line##* }" = "$(awk '/^md5/ {print $2}' "$OUT/pushexp.log")" ] || { echo "md5 differs"; exit 1; }
}
{
  echo "$(nproc) CPUs, $(uname -r)"
  for r in 1 2; do
    one direct 1024
    for ra in 1024 4096 16384 65536; do one pagecache $ra; done
  done
  head -c "$SIZE" /dev/urandom > /dev/shm/ra-ref.bin
  python3 - /dev/shm/ra-ref.bin <<'PY'
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); buf = mmap.mmap(-1, 1 << 20); n = 0; t0 = time.perf_counter()
while got := os.preadv(fd, [buf], n):
    n += got
print(f"tmpfs {n / (time.perf_counter() - t0) / 1e9:.3f} GB/s")
PY
  rm -f /dev/shm/ra-ref.bin
} | tee "$OUT/readahead-experiment.txt"
