#!/usr/bin/env bash
# Shared fetches on a GPU machine: PROCS (8) processes landing the same COUNT (8) objects of
# SIZE (1 GiB) at the same moment, against one process alone, ROUNDS (3) times, through a mount
# with --gpu-share and one without (scripts/gpu/share_bench.py). Reads of distinct objects with
# sharing on against off: scripts/gpu/gpu_ab.sh with DISTINCT=1 COUNT=64 VARIANTS='off s3gdsfs
# on s3gdsfs --gpu-share'. Needs .dev/gpu (make gpu-bundle).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-share-bench}
PROCS=${PROCS:-8}; COUNT=${COUNT:-8}; SIZE=${SIZE:-$((1 << 30))}; ROUNDS=${ROUNDS:-3}
source scripts/gpu/lib.sh
export PYTHONUNBUFFERED=1
start_store
upload same- "$COUNT" "$SIZE" 700 > "$OUT/same.json"
for share in true false; do
  mount_s3gdsfs "s3gdsfs-share-$share.log" --gpu-share=$share
  python3 scripts/gpu/share_bench.py --mount "$MP" --manifest "$OUT/same.json" --procs "$PROCS" --rounds "$ROUNDS" \
    --metrics http://127.0.0.1:9737/metrics --label "gpu-share=$share" --out "$OUT/share-$share.json" \
    || echo "gpu-share=$share: failed"
  unmount_s3gdsfs | tee "$OUT/peak-share-$share.txt"
done
