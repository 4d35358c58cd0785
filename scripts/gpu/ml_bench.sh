#!/usr/bin/env bash
# The programs people already run, on a GPU machine, against versitygw on /dev/shm in one run:
#   - a safetensors checkpoint of GB (default 8) GB: s3gds.load_safetensors from the mount against
#     safetensors.torch.load_file of the same path on the mount and Run:ai's model streamer
#     reading it from the server, ROUNDS rounds, every tensor compared with load_file of the
#     local copy;
#   - torch.cuda.gds.GdsFile(...).load_storage of the checkpoint on the mount, without and with
#     LD_PRELOAD of libs3gdsfs_cufile.so: bytes compared, the daemon's counters for the file
#     (GDS_COMPARE: mount flags for one more read with the library on a mount of its own);
#   - client/python/examples/dataset.py with 8 ranks over shards of mixed sizes: one timed epoch,
#     then one with every file's sha256 compared with read(2)'s.
# MOUNT_FLAGS: flags for the mount. Needs .dev/gpu (make gpu-bundle) and, for the streamer, its wheels and boto3's in .whl.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-ml-bench}
GB=${GB:-8}
ROUNDS=${ROUNDS:-2}
RANKS=${RANKS:-8}
source scripts/gpu/lib.sh
install_wheels
export PYTHONUNBUFFERED=1
export AWS_ENDPOINT_URL=$EP AWS_EC2_METADATA_DISABLED=true RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0
start_store
CKPT=/dev/shm/ml-bench-ckpt.safetensors
python3 scripts/gpu/ml_bench.py gen --out $CKPT --gb "$GB"
python3 -c 'import boto3; boto3.client("s3", endpoint_url="'$EP'").create_bucket(Bucket="bench")' 2>/dev/null || true
python3 scripts/gpu/ml_bench.py upload --endpoint $EP --bucket bench --key ckpt.safetensors --file $CKPT
# Shards of mixed sizes for the dataset (DATASET=0 skips it): 1, 16, 64 and 256 MiB.
if [ "${DATASET:-1}" = 1 ]; then
  upload shards/a- 256 $((1 << 20)) 11 > "$OUT/shards-a.json"
  upload shards/b- 128 $((16 << 20)) 12 > "$OUT/shards-b.json"
  upload shards/c- 64 $((64 << 20)) 13 > "$OUT/shards-c.json"
  upload shards/d- 32 $((256 << 20)) 14 > "$OUT/shards-d.json"
fi

mount_s3gdsfs s3gdsfs-ml.log ${MOUNT_FLAGS:-}
python3 scripts/gpu/ml_bench.py checkpoint --mount $MP --key ckpt.safetensors --local $CKPT --endpoint $EP \
  --bucket bench --rounds "$ROUNDS" --readers "${READERS:-}" --others "${OTHERS:-1}" --out "$OUT/checkpoint.json" || echo "checkpoint: failed"
if [ "${GDS:-1}" = 1 ]; then
python3 scripts/gpu/ml_bench.py gds --mount $MP --key ckpt.safetensors --local $CKPT --out "$OUT/gds-plain.json" \
  || echo "gds without the library: failed"
LD_PRELOAD=$BIN/libs3gdsfs_cufile.so S3GDSFS_CUFILE_DEBUG=1 python3 scripts/gpu/ml_bench.py gds --mount $MP \
  --key ckpt.safetensors --local $CKPT --out "$OUT/gds-preload.json" 2> "$OUT/gds-preload.err" \
  || { echo "gds with the library: failed"; tail -20 "$OUT/gds-preload.err"; }
head -c 2000 "$OUT/gds-preload.err" || true
# GDS_COMPARE: mount flags to read the file with the library again, on a mount of its own.
if [ -n "${GDS_COMPARE:-}" ]; then
  unmount_s3gdsfs > /dev/null
  # shellcheck disable=SC2086 # a list of flags
  mount_s3gdsfs s3gdsfs-ml-compare.log $GDS_COMPARE
  echo "GdsFile with the library, mount flags: $GDS_COMPARE (twice: the first load of a mount is slow)"
  for i in 1 2; do
    LD_PRELOAD=$BIN/libs3gdsfs_cufile.so python3 scripts/gpu/ml_bench.py gds --mount $MP --key ckpt.safetensors \
      --local $CKPT --out "$OUT/gds-preload-compare-$i.json" || echo "gds with the library (compare): failed"
  done
fi
fi

[ "${DATASET:-1}" = 1 ] || { unmount_s3gdsfs; exit 0; }
# dataset: RANKS processes, three timed epochs (the last is reported: by then every rank is
# past its start-up), then one with every file checked.
for pass in timed checked; do
  flags=(--epochs 3); [ $pass = checked ] && flags=(--check)
  start=$(date +%s.%N)
  pids=()
  for r in $(seq 0 $((RANKS - 1))); do
    RANK=$r WORLD_SIZE=$RANKS python3 client/python/examples/dataset.py "$MP/shards/" --device cuda "${flags[@]}" \
      > "$OUT/dataset-$pass-$r.txt" 2>&1 & pids+=($!)
  done
  fail=0; for p in "${pids[@]}"; do wait "$p" || fail=1; done
  end=$(date +%s.%N)
  python3 - "$OUT" "$pass" "$RANKS" "$start" "$end" "$fail" <<'PY'
import glob, json, re, sys
out, pas, ranks, start, end, fail = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
files = nbytes = checked = 0
secs, lines = [], []
for r in range(ranks):
    t = open(f"{out}/dataset-{pas}-{r}.txt").read()
    lines.append(t.strip().splitlines()[-1] if t.strip() else "")
    epochs = re.findall(r"epoch (\d+): (\d+) files, (\d+) bytes in ([\d.]+) s", t)
    if epochs:
        _, f, b, s = epochs[-1]
        files += int(f); nbytes += int(b); secs.append(float(s))
    c = re.search(r"sha256 checked for (\d+) files", t)
    checked += int(c.group(1)) if c else 0
total = sum(o["size"] for f in glob.glob(f"{out}/shards-*.json") for o in json.load(open(f))["objects"])
count = sum(len(json.load(open(f))["objects"]) for f in glob.glob(f"{out}/shards-*.json"))
wall = end - start
slowest = max(secs) if secs else float("nan")
res = {"pass": pas, "ranks": ranks, "files": files, "bytes": nbytes, "expected_files": count, "expected_bytes": total,
       "rank_epoch_seconds": secs, "gbps": nbytes / slowest / 1e9 if secs else None, "wall_s": wall,
       "checked": checked, "failed": fail == "1", "last_lines": lines}
json.dump(res, open(f"{out}/dataset-{pas}.json", "w"), indent=1)
print(f"dataset {pas}: {ranks} ranks, last epoch {files}/{count} files, {nbytes}/{total} bytes, slowest rank "
      f"{slowest:.2f} s ({res['gbps'] or 0:.2f} GB/s together), {wall:.1f} s wall with start-up, "
      f"sha256 checked {checked}, failed {fail == '1'}")
for l in lines[:2]:
    print("  ", l)
PY
done
unmount_s3gdsfs | tee "$OUT/peak-ml.txt"
rm -f $CKPT
(cd "$OUT" && tar -czf ml-logs.tgz --ignore-failed-read dataset-*.txt s3gdsfs-ml.log shards-*.json gds-preload.err 2>/dev/null; rm -f dataset-*-*.txt shards-*.json) || true
