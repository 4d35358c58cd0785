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

source scripts/gpu/fuse_readers.sh

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
