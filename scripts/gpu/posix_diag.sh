#!/usr/bin/env bash
# Where the POSIX read path's time goes on a many-core machine: one and four
# sequential readers (dd, 1 MiB reads, page cache dropped, a fresh mount per
# run) under several mount settings, the daemon's CPU seconds per run, raw
# minio-go GETs with the same streams, and CPU profiles of the daemon.
# Needs .dev/gpu (make gpu-bundle). VARIANTS: mount flag sets, one per line.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-posix-diag}
SIZE=${SIZE:-$((4 << 30))}
source scripts/gpu/lib.sh
start_store
upload d- 4 "$SIZE" 500 > "$OUT/objects.json"
KEYS=$(keys_of "$OUT/objects.json")

# cpu_seconds PID: user+system CPU time of a process so far.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{print ($14+$15)/hz}' "/proc/$1/stat"; }

# first_objects N: paths of the first N objects.
first_objects() { local i; for i in $(seq 0 $(($1 - 1))); do printf '%s/d-%04d\n' "$MP" "$i"; done; }

# readers N: N concurrent dd readers of the first N objects; prints GB/s and
# the daemon's and versitygw's CPU cores over the run.
readers() {
  drop_page_cache
  local d0 v0 t0 t1
  d0=$(cpu_seconds "$DAEMON"); v0=$(cpu_seconds "$VGW"); t0=$(date +%s.%N)
  read_parallel $(first_objects "$1")
  t1=$(date +%s.%N)
  python3 -c "import sys; n,s,t0,t1,d0,d1,v0,v1=map(float,sys.argv[1:]); dt=t1-t0; print(f'{n*s/dt/1e9:6.2f} GB/s  daemon {(d1-d0)/dt:5.2f} cores  versitygw {(v1-v0)/dt:5.2f} cores')" \
    "$1" "$SIZE" "$t0" "$t1" "$d0" "$(cpu_seconds "$DAEMON")" "$v0" "$(cpu_seconds "$VGW")"
}

echo "== raw minio-go, 1 and 4 streams" | tee "$OUT/summary.txt"
for w in 1 4; do
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$KEYS" --workers $w --seconds 6 > "$OUT/raw$w.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('raw', sys.argv[2], 'streams', {k: v for k, v in d.items() if 'gbps' in k.lower() or 'GB' in k})" "$OUT/raw$w.json" "$w" | tee -a "$OUT/summary.txt"
done

VARIANTS=${VARIANTS:-"
--read-ahead 4MiB
--read-ahead 16MiB
--read-ahead 64MiB
--read-ahead 16MiB --part-size 16MiB --max-window 256MiB
--direct-io"}
n=0
while IFS= read -r flags; do
  n=$((n + 1))
  for r in 1 4; do
    mount_s3gdsfs "s3gdsfs-$n-$r.log" $flags
    echo "[$flags] readers=$r: $(readers $r)" | tee -a "$OUT/summary.txt"
    unmount_s3gdsfs
  done
done <<< "$VARIANTS"

# Profiles with the default settings, one reader and four.
for r in 1 4; do
  mount_s3gdsfs "s3gdsfs-prof-$r.log"
  drop_page_cache
  python3 -c "import urllib.request,sys; open(sys.argv[1],'wb').write(urllib.request.urlopen('http://127.0.0.1:9737/debug/pprof/profile?seconds=2').read())" "$OUT/cpu-$r.pprof" &
  prof=$!
  sleep 0.2
  read_parallel $(first_objects "$r")
  wait $prof
  unmount_s3gdsfs
done
