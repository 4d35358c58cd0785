#!/usr/bin/env bash
# The scaling benchmark of the POSIX path on this machine: N = 1, 2, 4, 8
# processes x 8 threads reading whole objects through one mount, against raw
# minio-go GETs with the same total streams. `make bench-scaling` runs it.
# The daemon's block cache is off and readers drop the kernel's pages, so
# every byte comes from the server, as for a dataset larger than memory.
set -euo pipefail
OUT=${OUT:-out/bench-scaling}
SECS=${SECS:-5}
PROCS=${PROCS:-1,2,4,8}
SIZE=${SIZE:-$((64 << 20))}
mkdir -p "$OUT/raw"
# BINDIR: prebuilt s3gdsfs and s3load (from `make gpu-bundle`, on a machine
# without Go); otherwise they are built into bin/.
if [ -z "${BINDIR:-}" ]; then
  go build -o bin/s3gdsfs ./cmd/s3gdsfs
  go build -o bin/s3load ./bench/s3load
  BINDIR=bin
  VERSITYGW=${VERSITYGW:-$(go env GOPATH)/bin/versitygw}
fi
export AWS_ACCESS_KEY_ID=scaling AWS_SECRET_ACCESS_KEY=scaling-secret-$RANDOM$RANDOM AWS_REGION=us-east-1
ROOT=$(mktemp -d /dev/shm/s3gdsfs-scaling-XXXX)
MP=$(mktemp -d)
PORT=$((20000 + RANDOM % 20000))
EP=http://127.0.0.1:$PORT
mkdir -p "$ROOT/data" "$ROOT/meta"
# Connections kept, as S3 services keep them; VGW_KEEPALIVE=0: a connection per request.
keep=--keep-alive; [ "${VGW_KEEPALIVE:-1}" = 0 ] && keep=
"$VERSITYGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --region us-east-1 \
  --port 127.0.0.1:$PORT --quiet $keep posix --sidecar "$ROOT/meta" "$ROOT/data" > "$OUT/versitygw.log" 2>&1 &
VGW=$!
DAEMON=
cleanup() {
  if [ -n "$DAEMON" ]; then kill -INT "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; fi
  umount -l "$MP" 2>/dev/null || true
  kill "$VGW" 2>/dev/null || true
  rm -rf "$ROOT"
}
trap cleanup EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done

"$BINDIR/s3load" put --endpoint $EP --bucket bench --prefix obj- --count 16 --size "$SIZE" --seed 7 > "$OUT/objects.json"
KEYS=$(python3 -c 'import json,sys; print(",".join(o["key"] for o in json.load(open(sys.argv[1]))["objects"]))' "$OUT/objects.json")
for n in ${PROCS//,/ }; do
  "$BINDIR/s3load" get --endpoint $EP --bucket bench --keys "$KEYS" --workers $((n * 8)) --seconds "$SECS" > "$OUT/raw/raw_big_$((n * 8)).json"
done
"$BINDIR/s3gdsfs" mount --endpoint $EP --bucket bench --metrics-addr 127.0.0.1:0 --gpu off --cache-size 0 ${MOUNT_FLAGS:-} "$MP" > "$OUT/s3gdsfs.log" 2>&1 &
DAEMON=$!
for _ in $(seq 100); do mountpoint -q "$MP" && break; sleep 0.1; done
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user+system ticks
D0=$(cpu "$DAEMON"); S0=$(cpu "$VGW")
python3 scripts/scaling.py --path posix --mount "$MP" --manifest "$OUT/objects.json" --procs "$PROCS" \
  --threads 8 --seconds "$SECS" --raw-dir "$OUT/raw" --label posix --out "$OUT/scaling-posix.json"
D1=$(cpu "$DAEMON"); S1=$(cpu "$VGW")
grep -E '^VmHWM' /proc/$DAEMON/status | tee "$OUT/peak.txt"
# The daemon's counters for the whole run (S3 bytes against bytes read, streams and how they ended).
ADDR=$(grep -o 'metrics=[0-9.:]*' "$OUT/s3gdsfs.log" | head -1 | cut -d= -f2)
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://$ADDR/metrics" \
  | grep -E '^s3gdsfs_(s3_received_bytes_total|posix_read_bytes_total|posix_reads_total|read_stream|blocks_kept_for_readers_total|splice_|s3_requests_total|block_cache)' > "$OUT/metrics.txt" || true
# CPU seconds per GB read through the mount, over all N: the daemon's and the server's.
python3 - "$OUT/metrics.txt" $((D1 - D0)) $((S1 - S0)) "$(getconf CLK_TCK)" <<'PY' | tee "$OUT/cpu.txt"
import sys
m = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[1]) if " " in l}
gb = m.get("s3gdsfs_posix_read_bytes_total", 0) / 1e9
d, s, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"CPU s/GB over the run ({gb:.1f} GB): daemon {d / hz / gb:.2f}, server {s / hz / gb:.2f}")
PY
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 scripts/plot_scaling.py "$OUT/scaling-posix.png" "$OUT/scaling-posix.json"
fi
echo "wrote $OUT/scaling-posix.json"
