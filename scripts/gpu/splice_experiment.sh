#!/usr/bin/env bash
# The experiment behind the splice rows of docs/benchmarks.md, without S3:
# bench/spliceexp serves files whose bytes come from a local TCP stream (a
# server that sendfiles a file on /dev/shm, as versitygw sends a whole
# object) to direct-I/O readers, either read into buffers and written with
# writev (the daemon's path) or spliced socket -> pipe -> /dev/fuse; one
# reader and READERS at once, each reading its own file with 1 MiB preads,
# then each file read again and its md5 checked. Runs here (BIN=dir with
# spliceexp) or on the GPU machine (.dev/gpu/spliceexp.xz).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-splice-experiment}
SIZE=${SIZE:-$((1 << 30))}
READERS=${READERS:-4}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
if [ -z "${BIN:-}" ]; then
  BIN=$(mktemp -d)
  xz -dc .dev/gpu/spliceexp.xz > "$BIN/spliceexp"; chmod +x "$BIN/spliceexp"
fi
# A reply is spliced through a pipe that must hold 1 MiB and its header.
[ "$(cat /proc/sys/fs/pipe-max-size)" -ge $((4 << 20)) ] || echo $((4 << 20)) > /proc/sys/fs/pipe-max-size
SRC=/dev/shm/spliceexp.bin
MNT=$(mktemp -d)
head -c "$SIZE" /dev/urandom > "$SRC"
WANT=$(md5sum "$SRC" | cut -d' ' -f1)
"$BIN/spliceexp" serve -file "$SRC" 2> "$OUT/serve.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; fusermount3 -u "$MNT" 2>/dev/null || umount "$MNT" 2>/dev/null; rm -f "$SRC"' EXIT
for _ in $(seq 100); do grep -q serving "$OUT/serve.log" && break; sleep 0.1; done

cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # clock ticks

# one MODE N: mount, N readers at once (timed), then every file's md5.
one() {
  local mode=$1 n=$2
  "$BIN/spliceexp" mount -mode "$mode" -file "$SRC" -files "$n" "$MNT" 2> "$OUT/mount.log" &
  local pid=$!
  for _ in $(seq 100); do grep -q mounted "$OUT/mount.log" && break; sleep 0.1; done
  local s0 d0; s0=$(cpu_of $SERVER); d0=$(cpu_of $pid)
  python3 - "$MNT" "$n" <<'PY'
import mmap, os, resource, sys, time
from concurrent.futures import ProcessPoolExecutor
def read(path):
    fd = os.open(path, os.O_RDONLY); buf = mmap.mmap(-1, 1 << 20); n = 0
    t0 = time.perf_counter()
    while got := os.preadv(fd, [buf], n):
        n += got
    t = time.perf_counter() - t0
    os.close(fd)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return n, t, ru.ru_utime + ru.ru_stime
mnt, n = sys.argv[1], int(sys.argv[2])
with ProcessPoolExecutor(n) as ex:
    t0 = time.perf_counter()
    res = list(ex.map(read, [f"{mnt}/f{i}" for i in range(n)]))
    wall = time.perf_counter() - t0
total = sum(r[0] for r in res)
each = " ".join(f"{r[0] / r[1] / 1e9:.3f}" for r in res)
print(f"  readers {n}: {total / wall / 1e9:.3f} GB/s together (each {each}), reader CPU {sum(r[2] for r in res) / (total / 1e9):.3f} s/GB")
PY
  local s1 d1; s1=$(cpu_of $SERVER); d1=$(cpu_of $pid)
  for i in $(seq 0 $((n - 1))); do
    got=$(md5sum "$MNT/f$i" | cut -d' ' -f1)
    [ "$got" = "$WANT" ] || { echo "  f$i md5 $got, want $WANT"; exit 1; }
  done
  kill -INT $pid; wait $pid || true
  awk -v d=$((d1 - d0)) -v s=$((s1 - s0)) -v t="$(getconf CLK_TCK)" -v gb="$((n * SIZE))" \
    'BEGIN { gb /= 1e9; printf "  CPU s/GB in the timed pass: daemon %.3f, server %.3f; md5 of every file right\n", d / t / gb, s / t / gb }'
}

{
  echo "spliceexp: $(nproc) CPUs, $(uname -r), $((SIZE >> 20)) MiB per file"
  for r in $(seq "$ROUNDS"); do
    for m in copy splice; do
      echo "== round $r, $m"
      one $m 1
      one $m "$READERS"
    done
  done
} | tee "$OUT/splice-experiment.txt"
