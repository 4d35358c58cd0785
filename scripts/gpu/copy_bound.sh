#!/usr/bin/env bash
# What the device copies alone cost raw GETs on this host: raw minio-go GETs
# (s3load, no two workers on one object) by themselves, then beside host-to-device
# copies of other, cold, pinned bytes at the rate the GETs reached alone
# (copy_load.py: no socket, no daemon, next to no CPU), then the GETs landed in
# device memory through pinned slots as the GPU path lands them (s3load --device 0).
# If the copies of other bytes cost the GETs what the GPU path's own copies cost
# them, the gap is the host's memory, not the design. ROUNDS rounds of SECS seconds
# at each process count in PROCS (x 8 threads), 64 objects of 256 MiB.
# Needs .dev/gpu (make gpu-bundle) and torch. Writes copy-bound.json under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/s3gdsfs-copy-bound}
SECS=${SECS:-4}; ROUNDS=${ROUNDS:-2}; PROCS=${PROCS:-1,8}
source scripts/gpu/lib.sh
start_store
upload big- 64 $((256 << 20)) 100 > "$OUT/big.json"
keys=$(keys_of "$OUT/big.json")
get() { # get WORKERS [flags]: one s3load run, its GB/s
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$keys" --workers "$1" --seconds "$SECS" "${@:2}" |
    python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["gbps"])'
}
"$BIN/s3load" get --endpoint $EP --bucket bench --keys "$keys" --workers 8 --seconds 1 > /dev/null # warm
echo '{"runs": [' > "$OUT/copy-bound.json"
sep=
for round in $(seq "$ROUNDS"); do
  for n in ${PROCS//,/ }; do
    w=$((n * 8))
    alone=$(get $w)
    rm -f "$OUT/ready"
    python3 scripts/gpu/copy_load.py --rate "$alone" --seconds $((SECS + 1)) --ready "$OUT/ready" > "$OUT/load.json" &
    load=$!
    for _ in $(seq 300); do [ -e "$OUT/ready" ] && break; sleep 0.1; done
    [ -e "$OUT/ready" ] || { echo "copy_load never began"; exit 1; }
    beside=$(get $w)
    wait $load
    copied=$(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["gbps"])' "$OUT/load.json")
    device=$(get $w --device 0)
    python3 -c 'import sys; r, n, a, b, c, d = sys.argv[1:]; a, b, c, d = map(float, (a, b, c, d))
print(f"round {r} N={n}: raw {a:.2f} GB/s; beside {c:.2f} GB/s of copies of other bytes {b:.2f} ({b/a:.3f}x); landed in device memory {d:.2f} ({d/a:.3f}x)")' \
      "$round" "$n" "$alone" "$beside" "$copied" "$device" | tee -a "$OUT/copy-bound.txt"
    echo "$sep{\"round\": $round, \"procs\": $n, \"raw_gbps\": $alone, \"raw_beside_copies_gbps\": $beside, \"copies_gbps\": $copied, \"device_gbps\": $device}" >> "$OUT/copy-bound.json"
    sep=,
  done
done
echo ']}' >> "$OUT/copy-bound.json"
