#!/usr/bin/env bash
# Mounts side by side, one server: each round reads one 1 GiB object by a
# raw GET (s3load, one stream) and then through every variant's mount with
# dd (1 MiB reads, direct I/O as the mount serves large files), the page
# cache dropped before each read. Many short rounds, taken in turn, give
# paired ratios where one bench run per variant gives one. Needs .dev/gpu
# (make gpu-bundle); a build to compare goes in .dev/alt/NAME.xz.
#
# VARIANTS: one per line, "label|binary|mount flags|environment", binary
# "s3gdsfs" (the bundle's) or NAME of .dev/alt/NAME.xz; the environment
# (optional, NAME=value words) is the daemon's. ROUNDS (default 12).
# Writes ab.txt (a line per round, the means at the end) and each mount's
# log under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-mount-ab}
ROUNDS=${ROUNDS:-12}
source scripts/gpu/lib.sh
unpack_alt_builds
start_store
upload ab- 1 $((1 << 30)) 7 > "$OUT/objects.json"
KEY=$(keys_of "$OUT/objects.json")

labels=() mps=() pids=()
i=0
while IFS='|' read -r label binary flags envs; do
  [ -z "$label" ] && continue
  mp=$(mktemp -d)
  # shellcheck disable=SC2086 # flags and envs are lists of words
  env $envs "$BIN/$binary" mount --endpoint $EP --bucket bench --metrics-addr 127.0.0.1:$((9800 + i)) $flags "$mp" > "$OUT/mount-$label.log" 2>&1 &
  pids+=($!) labels+=("$label") mps+=("$mp")
  for _ in $(seq 100); do mountpoint -q "$mp" && break; sleep 0.1; done
  mountpoint -q "$mp" || { echo "mount $label failed"; cat "$OUT/mount-$label.log"; exit 1; }
  i=$((i + 1))
done <<< "$VARIANTS"
stop_mounts() {
  for mp in "${mps[@]}"; do fusermount3 -u "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  cleanup
}
trap stop_mounts EXIT

gbps() { awk -v b=$((1 << 30)) -v s="$1" 'BEGIN {printf "%.3f", b / s / 1e9}'; }
{
  echo "host: $(nproc) cores, kernel $(uname -r); $ROUNDS rounds, 1 GiB each read"
  for r in $(seq "$ROUNDS"); do
    drop_page_cache
    raw=$("$BIN/s3load" get --endpoint $EP --bucket bench --keys "$KEY" --workers 1 --seconds 0.01 |
      python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["gbps"])')
    line="round $r: raw $raw"
    for j in "${!mps[@]}"; do
      drop_page_cache
      t0=$(date +%s.%N)
      dd if="${mps[$j]}/$KEY" of=/dev/null bs=1M status=none
      t1=$(date +%s.%N)
      g=$(gbps "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
      line="$line  ${labels[$j]} $g ($(awk -v g="$g" -v r="$raw" 'BEGIN {printf "%.2f", g / r}'))"
    done
    echo "$line"
  done
} | tee "$OUT/ab.txt"
# Means of each column: raw, then each variant's GB/s and ratio.
awk '/^round/ {n++; raw += $4; for (i = 5; i <= NF; i += 3) {lab[i] = $i; g[i] += $(i + 1); gsub(/[()]/, "", $(i + 2)); q[i] += $(i + 2)}}
  END {printf "means over %d rounds: raw %.3f", n, raw / n; for (i = 5; i in lab; i += 3) printf "  %s %.3f (%.3f)", lab[i], g[i] / n, q[i] / n; print ""}' "$OUT/ab.txt" | tee -a "$OUT/ab.txt"
for j in "${!mps[@]}"; do
  echo "${labels[$j]}: $(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://127.0.0.1:$((9800 + j))/metrics" | grep -E '^s3gdsfs_(splice_socket_waits|splice_bytes|splice_ahead_bytes)_total' | tr '\n' ' ')" | tee -a "$OUT/ab.txt"
done
