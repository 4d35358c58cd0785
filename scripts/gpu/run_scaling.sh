#!/usr/bin/env bash
# The scaling benchmark on a GPU machine: N = 1, 2, 4, 8 processes x 8
# threads, 256 MiB objects (and 64 MiB objects for operations per second),
# through the GPU HTTP path and the loopback RDMA path, against raw
# minio-go GETs with the same total streams. Writes JSON and a PNG under $OUT.
OUT=${OUT:-/tmp/s3gdsfs-scaling}
SECS=${SECS:-8}
PROCS=${PROCS:-1,2,4,8}
DEVICES=${DEVICES:-1}
source scripts/gpu/lib.sh

start_store
upload big- 16 $((256 << 20)) 100 > "$OUT/big.json"
upload mid- 32 $((64 << 20)) 300 > "$OUT/mid.json"

echo "== raw minio-go, same total streams"
mkdir -p "$OUT/raw"
for n in ${PROCS//,/ }; do
  w=$((n * 8))
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$(keys_of "$OUT/big.json")" --workers $w --seconds "$SECS" > "$OUT/raw/raw_big_$w.json"
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$(keys_of "$OUT/mid.json")" --workers $w --seconds "$SECS" > "$OUT/raw/raw_mid_$w.json"
  echo "raw $w streams: $(cat "$OUT/raw/raw_big_$w.json")"
done

for path in ${PATHS:-http rdma}; do
  flags=()
  [ $path = rdma ] && flags=(--rdma=loopback)
  echo "== GPU $path path"
  mount_s3gdsfs "s3gdsfs-$path.log" "${flags[@]}" ${MOUNT_FLAGS:-}
  python3 scripts/scaling.py --path gpu --mount "$MP" --manifest "$OUT/big.json" --ops-manifest "$OUT/mid.json" \
    --procs "$PROCS" --threads 8 --seconds "$SECS" --devices "$DEVICES" --raw-dir "$OUT/raw" \
    --label "gpu-$path" --out "$OUT/scaling-$path.json"
  unmount_s3gdsfs | tee "$OUT/peak-$path.txt"
done
python3 scripts/plot_scaling.py "$OUT/scaling.png" "$OUT"/scaling-*.json
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
import glob
for f in sorted(glob.glob(f"{out}/scaling-*.json")):
    p = f.rsplit("-", 1)[1][:-5]
    d = json.load(open(f))
    for r, o in zip(d["runs"], d["ops_runs"] or [{}] * len(d["runs"])):
        print(p, r["procs"], "GB/s %.2f raw %.2f ratio %.2f" % (r["gbps"], r.get("raw", {}).get("gbps", 0), r.get("ratio_to_raw", 0)),
              "dev %.3f" % r["max_share_deviation"], "share", r["transport_share"], "ops/s %.1f raw %.1f" % (o.get("ops_per_s", 0), o.get("raw", {}).get("ops_per_s", 0)),
              "errors", len(r["errors"]))
PY
