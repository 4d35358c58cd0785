#!/usr/bin/env bash
# Compares GPU-path settings in one run: the single-process benchmark and
# the scaling benchmark under several scheduler and staging settings.
OUT=${OUT:-/tmp/s3gdsfs-diag}
SECS=${SECS:-6}
source scripts/gpu/lib.sh
start_store
upload big- 16 $((256 << 20)) 100 > "$OUT/big.json"
mkdir -p "$OUT/raw"
"$BIN/s3load" get --endpoint $EP --bucket bench --keys "$(keys_of "$OUT/big.json")" --workers 8 --seconds "$SECS" | tee "$OUT/raw/raw_big_8.json"
"$BIN/s3load" get --endpoint $EP --bucket bench --keys "$(keys_of "$OUT/big.json")" --workers 64 --seconds "$SECS" | tee "$OUT/raw/raw_big_64.json"
metric() { python3 -c 'import urllib.request,sys; [print(l) for l in urllib.request.urlopen("http://127.0.0.1:9737/metrics").read().decode().splitlines() if l.startswith(tuple(sys.argv[1:]))]' "$@"; }
i=0
for flags in "" "--gpu-max-ops 512 --gpu-max-bytes 64GiB" "--staging-slots 128" "--gpu-streams 1" "--staging-slot-size 16MiB --staging-slots 64"; do
  i=$((i+1))
  echo "== flags: [$flags]"
  mount_s3gdsfs "d$i.log" $flags
  python3 scripts/gpu/gpu_check.py --mount "$MP" --manifest "$OUT/big.json" --threads 8 --seconds "$SECS" --only-throughput | python3 -c 'import json,sys; d=json.load(sys.stdin); print("gpu_check 1 proc x 8 threads: %.2f GB/s copy-wait share %.3f" % (d["gbps"], d["copy_wait_share"]))'
  python3 scripts/scaling.py --path gpu --mount "$MP" --manifest "$OUT/big.json" --procs 1,8 --threads 8 --seconds "$SECS" --raw-dir "$OUT/raw" --label "d$i" --out "$OUT/d$i.json" 2>&1 | grep -v "^\[W"
  metric s3gdsfs_gpu_copy_wait_seconds_total s3gdsfs_gpu_sched_wait_seconds_sum s3gdsfs_gpu_sched_wait_seconds_count s3gdsfs_gpu_read_seconds_sum s3gdsfs_gpu_reads_total
  unmount_s3gdsfs
done
