#!/usr/bin/env bash
# The GPU path's throughput (one process, THREADS threads, gpu_check.py
# --only-throughput) between raw minio-go references taken before and after
# it with 8 and 16 workers, so that the ratio compares runs minutes apart on
# one server. Beside each reference before, the same GETs into a ring of
# 256 MiB per worker (--ring 256), whose destination is cold as the daemon's
# pinned staging is, and then as 64 MiB ranged GETs too (--part), the GPU
# path's parts, which the server may serve at another cost than whole
# objects: the parts of a gap that are the destination's and the server's,
# not the daemon's. A second s3load to compare goes in .dev/alt/NAME.xz (RAW_ALT=NAME).
# MOUNTS: mount flags to compare, one set per line (default: one line, none),
# for instance staging rings small enough to stay in the CPU's cache
# ("--staging-slot-size 2MiB --staging-slots 32").
# Needs .dev/gpu (make gpu-bundle). Writes raw-*.json, gpu-N.json under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-gpu-vs-raw}
THREADS=${THREADS:-8}
SECS=${SECS:-6}
source scripts/gpu/lib.sh
unpack_alt_builds
start_store
upload big- 16 $((256 << 20)) 100 > "$OUT/big.json"
KEYS=$(keys_of "$OUT/big.json")
raw() { # raw LABEL BINARY WORKERS [s3load flags...]
  "$BIN/$2" get --endpoint $EP --bucket bench --keys "$KEYS" --workers "$3" --seconds "$SECS" "${@:4}" > "$OUT/raw-$1-$3.json"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("raw %-8s %2s workers %.2f GB/s" % (sys.argv[2], sys.argv[3], d["gbps"]))' "$OUT/raw-$1-$3.json" "$1" "$3"
}
for w in 8 16; do
  raw before s3load $w
  raw cold-ring s3load $w --ring 256
  raw cold-parts s3load $w --ring 256 --part $((64 << 20))
  if [ -n "${RAW_ALT:-}" ]; then raw "$RAW_ALT" "$RAW_ALT" $w; fi
done
i=0
while IFS= read -r flags; do
  i=$((i + 1))
  # shellcheck disable=SC2086 # flags is a list of words
  mount_s3gdsfs "s3gdsfs-$i.log" $flags < /dev/null
  python3 scripts/gpu/gpu_check.py --mount "$MP" --manifest "$OUT/big.json" --threads "$THREADS" --seconds "$SECS" --only-throughput < /dev/null > "$OUT/gpu-$i.json"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("gpu path [%s], %d threads: %.2f GB/s, copy-wait share %.3f" % (sys.argv[2], d["threads"], d["gbps"], d["copy_wait_share"]))' "$OUT/gpu-$i.json" "$flags"
  unmount_s3gdsfs > /dev/null
done <<< "${MOUNTS:-}"
for w in 8 16; do raw after s3load $w; done
