#!/usr/bin/env bash
# GPU read checks and benchmark on a machine with a GPU, torch and no Go.
# Run from the repository root with the static binaries (make gpu-bundle)
# in .dev/gpu as .xz files. Writes its reports under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-gpu}
THREADS=${THREADS:-8}
SECONDS_PER_TEST=${SECONDS_PER_TEST:-15}
source scripts/gpu/lib.sh
start_store

echo "== upload"
upload big- 16 $((256 << 20)) 100 > "$OUT/big.json"
upload small- 4 $((5 << 20)) 200 > "$OUT/small.json"
KEYS=$(keys_of "$OUT/big.json")

echo "== raw minio-go GETs (the reference)"
for w in 8 16; do
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$KEYS" --workers $w --seconds "$SECONDS_PER_TEST" | tee "$OUT/raw$w.json"
done

echo "== mount"
mount_s3gdsfs s3gdsfs.log ${MOUNT_FLAGS:-}

echo "== GPU checks and benchmark"
python3 scripts/gpu/gpu_check.py --mount "$MP" --manifest "$OUT/big.json" --small-manifest "$OUT/small.json" \
  --threads "$THREADS" --seconds "$SECONDS_PER_TEST" --procs 8 | tee "$OUT/gpu.json"

python3 - "$OUT" <<'PY'
import json, sys, urllib.request
out = sys.argv[1]
text = urllib.request.urlopen("http://127.0.0.1:9737/metrics").read().decode()
open(out + "/metrics.txt", "w").write(text)
PY
grep -v '^#' "$OUT/metrics.txt" | grep -E 's3gdsfs_gpu_(read_bytes|reads|declined|imports|copy_wait|read_errors)' | tee "$OUT/gpu_counters.txt"
unmount_s3gdsfs | tee "$OUT/daemon_memory.txt"
