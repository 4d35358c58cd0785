#!/usr/bin/env bash
# Saving a checkpoint of CUDA tensors, on a GPU machine, against versitygw on /dev/shm:
# s3gds.save_safetensors (the write ioctl) against safetensors.torch.save_file through the mount
# and a raw boto3 multipart upload of the same bytes from host memory with the daemon's part size
# and parts at once, a POSIX sequential write of the same bytes, and torch.save to local disk
# plus boto3's upload_file (scripts/gpu/save_bench.py says how); then PROCS processes saving a
# shard each at once against one alone (scripts/gpu/save_procs.py). GB GB of tensors, ROUNDS rounds.
# Needs .dev/gpu (make gpu-bundle), torch, safetensors, and in .whl (carried: the machine has
# no registry) boto3, botocore, s3transfer and jmespath, and for the s3torch method
# s3torchconnectorclient (its cp312 manylinux wheel) and s3torchconnector (PyPI has only its
# sdist: `pip wheel --no-deps s3torchconnector==1.5.0 -w .whl`). Writes save.jsonl, save.json
# and the daemon's log and metrics under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-save}
GB=${GB:-8}
ROUNDS=${ROUNDS:-3}
PROCS=${PROCS:-8}
source scripts/gpu/lib.sh
install_wheels
export PYTHONUNBUFFERED=1
start_store
python3 -c 'import boto3; boto3.client("s3", endpoint_url="'$EP'").create_bucket(Bucket="bench")' 2>/dev/null || true
# The store's own rate for uploads: s3load's multipart uploads from host memory, the daemon's
# part size and parts at once (16 MiB, 4), and larger shapes, each with the parts' time and the
# completion's (a server that joins the parts by copying them pays it once per object).
ref() { "$BIN/s3load" upload --endpoint $EP --bucket bench --size "$(python3 -c "print(int($GB * 1e9))")" \
  --part $(($1 << 20)) --workers "$2" --rounds "${REF_ROUNDS:-2}" ${3//,/ } | tee -a "$OUT/upload_ref.jsonl"; }
: > "$OUT/upload_ref.jsonl"
# REF_SHAPES: MiB:parts-at-once[:s3load flags, commas for spaces]; "none" for none.
for shape in ${REF_SHAPES:-16:4 16:16 64:16 16:16:--unsigned,--md5}; do
  [ "$shape" = none ] && continue
  IFS=: read -r mib workers extra <<< "$shape"
  ref "$mib" "$workers" "$extra"
done
mount_s3gdsfs s3gdsfs.log --allow-writes ${MOUNT_FLAGS:-}
rc=0
python3 scripts/gpu/save_bench.py --mount "$MP" --endpoint $EP --bucket bench --gb "$GB" --rounds "$ROUNDS" \
  --json "$OUT/save.json" ${SAVE_FLAGS:-} | tee "$OUT/save.jsonl" || rc=$?
# PROCS processes saving a shard each at once, against one alone (PROCS=0: skipped).
if [ "$PROCS" -gt 1 ]; then
  python3 scripts/gpu/save_procs.py --mount "$MP" --gb "$GB" --procs "$PROCS" --json "$OUT/procs.json" \
    | tee -a "$OUT/save.jsonl" || rc=$?
fi
python3 - "$OUT" <<'PY' || true
import sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9737/metrics").read().decode()
open(sys.argv[1] + "/metrics.txt", "w").write(text)
PY
python3 - "$OUT" <<'PY' || true
import json, statistics, sys
out = sys.argv[1]
refs = [json.loads(l) for l in open(out + "/upload_ref.jsonl") if l.startswith("{")]
tag = lambda r: (" unsigned" if r["unsigned"] else "") + (" md5" if r.get("md5") else "")
save = json.load(open(out + "/save.json"))["median_gbps"]
for r in refs:
    shape = f'{r["part"] >> 20} MiB x {r["workers"]}' + tag(r)
    parts = statistics.median(x["parts_gbps"] for x in r["rounds"])
    done = statistics.median(x["complete_seconds"] for x in r["rounds"])
    ratios = " ".join(f"{m} {g / r['median_gbps']:.2f}x" for m, g in save.items())
    print(f"s3load upload {shape}: {r['median_gbps']:.3f} GB/s (parts {parts:.3f} GB/s, completion {done:.2f} s): {ratios}")
PY
grep -v '^#' "$OUT/metrics.txt" | grep -E 's3gdsfs_(write_bytes|uploads|upload_part_retries)' | tee "$OUT/write_counters.txt" || true
unmount_s3gdsfs | tee "$OUT/daemon_memory.txt"
exit $rc
