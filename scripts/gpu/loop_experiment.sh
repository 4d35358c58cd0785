#!/usr/bin/env bash
# What a FUSE request costs below any FUSE library, without S3: one and four
# direct-I/O readers of a 1 GiB memory-held file served by bench/loopexp (a
# loop of its own on /dev/fuse: blocking in read(2), or polling it without
# sleeping for 50 us after each request) and by bench/pushexp -mode direct
# (go-fuse, as the daemon; -poll 50us polls /dev/fuse as --fuse-poll does),
# each also with deep CPU idle states held off (/dev/cpu_dma_latency 0, for
# the run only), against tmpfs. Needs .dev/gpu (make gpu-bundle).
# docs/results/loop-experiment-h200.txt.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-loop-experiment}
SIZE=${SIZE:-$((1 << 30))}
mkdir -p "$OUT"
BIN=$(mktemp -d)
for f in .dev/gpu/loopexp.xz .dev/gpu/pushexp.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > "$BIN/$n"; chmod +x "$BIN/$n"; done
MNT=$(mktemp -d)
QOS=

qos_on() {
  python3 -c 'import os,struct,time
f=os.open("/dev/cpu_dma_latency",os.O_WRONLY); os.write(f,struct.pack("i",0)); time.sleep(3600)' &
  QOS=$!; sleep 0.3
}
qos_off() { [ -n "$QOS" ] && kill "$QOS" 2>/dev/null; wait "$QOS" 2>/dev/null || true; QOS=; }
trap 'qos_off; umount -l "$MNT" 2>/dev/null || true' EXIT

# readers N FILE: N processes read FILE at once in 1 MiB preadv calls, twice;
# each prints its rate and CPU, then one md5 of the file.
readers() {
  python3 - "$1" "$2" <<'PY'
import hashlib, mmap, os, resource, sys, time
from multiprocessing import Process, Queue
n, path = int(sys.argv[1]), sys.argv[2]
def one(q):
    fd = os.open(path, os.O_RDONLY); buf = mmap.mmap(-1, 1 << 20); got = 0
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
    while k := os.preadv(fd, [buf], got):
        got += k
    t = time.perf_counter() - t0; r1 = resource.getrusage(resource.RUSAGE_SELF)
    q.put((got / t / 1e9, ((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)) / (got / 1e9), t0, t0 + t, got))
for rnd in range(2):
    q = Queue(); ps = [Process(target=one, args=(q,)) for _ in range(n)]
    [p.start() for p in ps]; rs = [q.get() for _ in ps]; [p.join() for p in ps]
    agg = sum(r[4] for r in rs) / (max(r[3] for r in rs) - min(r[2] for r in rs)) / 1e9
    print(f"  {n} reader(s): together {agg:.3f} GB/s; each " + ", ".join(f"{r[0]:.3f}" for r in rs) + " GB/s; reader CPU " + ", ".join(f"{r[1]:.2f}" for r in rs) + " s/GB")
h = hashlib.md5(); fd = os.open(path, os.O_RDONLY)
while b := os.read(fd, 1 << 22):
    h.update(b)
print(f"  md5 {h.hexdigest()}")
PY
}

# serve LABEL QOS(0|1) ENV... -- CMD...: mount, read with 1 and 4 readers, unmount.
serve() {
  local label=$1 qos=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  echo "== $label$([ "$qos" = 1 ] && echo ', idle states held off')"
  env "${envs[@]}" "$@" "$MNT" > "$OUT/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 200); do [ -e "$MNT/f" ] && break; sleep 0.05; done
  [ "$qos" = 1 ] && qos_on
  readers 1 "$MNT/f"; readers 4 "$MNT/f"
  qos_off
  kill -INT "$pid"; wait "$pid" || true
  umount -l "$MNT" 2>/dev/null || true
  grep -E "^(md5|loopexp: [0-9])" "$OUT/server.log" | sed 's/^/  server: /'
}

{
  echo "host: $(nproc) cores, kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "cpuidle: governor $(cat /sys/devices/system/cpu/cpuidle/current_governor 2>/dev/null || echo none); states (exit latency us):" \
    $(for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do [ -d "$s" ] && echo "$(cat "$s/name")=$(cat "$s/latency")"; done)
  for q in 0 1; do
    serve "loopexp, 2 threads, blocking read" $q X=1 -- "$BIN/loopexp" -size "$SIZE"
    serve "loopexp, 2 threads, polling 50us" $q X=1 -- "$BIN/loopexp" -size "$SIZE" -spin 50us
    serve "go-fuse (pushexp -mode direct)" $q X=1 -- "$BIN/pushexp" -mode direct -size "$SIZE"
    serve "go-fuse polling 50us (pushexp -mode direct -poll 50us)" $q X=1 -- "$BIN/pushexp" -mode direct -poll 50us -size "$SIZE"
  done
  echo "== tmpfs reference"
  head -c "$SIZE" /dev/urandom > /dev/shm/loopexp-ref.bin
  readers 1 /dev/shm/loopexp-ref.bin; readers 4 /dev/shm/loopexp-ref.bin
  rm -f /dev/shm/loopexp-ref.bin
} 2>&1 | tee "$OUT/loop-experiment.txt"
