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
grep -v '^#' "$OUT/metrics.txt" | grep -E 's3gdsfs_(write_bytes|uploads|upload_part_retries)' | tee "$OUT/write_counters.txt" || true
unmount_s3gdsfs | tee "$OUT/daemon_memory.txt"
exit $rc
