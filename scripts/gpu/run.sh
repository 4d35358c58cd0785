#!/usr/bin/env bash
# GPU read checks and benchmark on a machine with a GPU, torch and no Go.
# Run from the repository root with the static binaries (make gpu-bundle)
# in .dev/gpu as .xz files. Writes its reports under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-gpu}
THREADS=${THREADS:-8}
SECONDS_PER_TEST=${SECONDS_PER_TEST:-15}
mkdir -p "$OUT"
BIN=$(mktemp -d)
for f in .dev/gpu/*.xz; do
  n=$(basename "${f%.xz}")
  xz -dc "$f" > "$BIN/$n"
  chmod +x "$BIN/$n"
done

export AWS_ACCESS_KEY_ID=gpubench AWS_SECRET_ACCESS_KEY=gpubench-secret-$RANDOM$RANDOM AWS_REGION=us-east-1
EP=http://127.0.0.1:7070
ROOT=/dev/shm/s3gdsfs-bench
MP=/mnt/s3gdsfs
rm -rf "$ROOT"; mkdir -p "$ROOT/data" "$ROOT/meta" "$MP"

cleanup() {
  [ -n "${DAEMON:-}" ] && kill -INT "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null || true
  umount -l "$MP" 2>/dev/null || true
  [ -n "${VGW:-}" ] && kill "$VGW" 2>/dev/null || true
  rm -rf "$ROOT"
}
trap cleanup EXIT

"$BIN/versitygw" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --region us-east-1 \
  --port 127.0.0.1:7070 --quiet posix --sidecar "$ROOT/meta" "$ROOT/data" > "$OUT/versitygw.log" 2>&1 &
VGW=$!
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/7070) 2>/dev/null && break; sleep 0.1; done

echo "== upload"
"$BIN/s3load" put --endpoint $EP --bucket bench --prefix big- --count 16 --size $((256 << 20)) --seed 100 > "$OUT/big.json"
"$BIN/s3load" put --endpoint $EP --bucket bench --prefix small- --count 4 --size $((5 << 20)) --seed 200 > "$OUT/small.json"
"$BIN/s3load" put --endpoint $EP --bucket bench --prefix mid- --count 16 --size $((64 << 20)) --seed 300 > "$OUT/mid.json"
KEYS=$(python3 -c 'import json,sys; print(",".join(o["key"] for o in json.load(open(sys.argv[1]))["objects"]))' "$OUT/big.json")

echo "== raw minio-go GETs (the reference)"
for w in 8 16; do
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$KEYS" --workers $w --seconds "$SECONDS_PER_TEST" | tee "$OUT/raw$w.json"
done

echo "== mount"
"$BIN/s3gdsfs" mount --endpoint $EP --bucket bench --metrics-addr 127.0.0.1:9737 ${MOUNT_FLAGS:-} "$MP" > "$OUT/s3gdsfs.log" 2>&1 &
DAEMON=$!
for _ in $(seq 100); do mountpoint -q "$MP" && break; sleep 0.1; done
mountpoint -q "$MP" || { cat "$OUT/s3gdsfs.log"; exit 1; }

echo "== GPU checks and benchmark"
python3 scripts/gpu/gpu_check.py --mount "$MP" --manifest "$OUT/big.json" --small-manifest "$OUT/small.json" \
  --threads "$THREADS" --seconds "$SECONDS_PER_TEST" --procs 8 | tee "$OUT/gpu.json"

python3 - "$OUT" <<'PY'
import json, sys, urllib.request
out = sys.argv[1]
text = urllib.request.urlopen("http://127.0.0.1:9737/metrics").read().decode()
open(out + "/metrics.txt", "w").write(text)
PY
grep -E '^(VmHWM|VmRSS)' /proc/$DAEMON/status | tee "$OUT/daemon_memory.txt"
grep -v '^#' "$OUT/metrics.txt" | grep -E 's3gdsfs_gpu_(read_bytes|reads|declined|imports|copy_wait|read_errors)' | tee "$OUT/gpu_counters.txt"
