#!/usr/bin/env bash
# The POSIX scaling benchmark (scripts/bench_scaling.sh) for the build in
# .dev/alt/s3gdsfs.xz (before) and the one in .dev/gpu (after), taken in turn
# ROUNDS times on the same machine. Needs .dev/gpu (make gpu-bundle). Writes
# one text file per run (the scaling figures, CPU per GB and the daemon's
# counters) and its JSON under $OUT.
OUT=${OUT:-/tmp/s3gdsfs-posix-scaling-ab}
source scripts/gpu/lib.sh # unpacks the bundle into $BIN
old=$(mktemp -d)
cp "$BIN/s3load" "$BIN/versitygw" "$old/"
xz -dc .dev/alt/s3gdsfs.xz > "$old/s3gdsfs"
chmod +x "$old/s3gdsfs"

# run NAME BINDIR [mount flags]
run() {
  local name=$1 dir=$2 tmp
  tmp=$(mktemp -d)
  echo "== $name (${3:---cache-size 0})" | tee "$OUT/$name.txt"
  OUT=$tmp BINDIR=$dir VERSITYGW=$dir/versitygw MOUNT_FLAGS=${3:-} scripts/bench_scaling.sh 2>&1 |
    grep -E '^(posix N=|VmHWM|CPU)' | tee -a "$OUT/$name.txt"
  cat "$tmp/metrics.txt" >> "$OUT/$name.txt"
  cp "$tmp/scaling-posix.json" "$OUT/$name.json"
  rm -rf "$tmp"
}
for r in $(seq "${ROUNDS:-2}"); do
  run "before-$r" "$old"
  run "after-$r" "$BIN"
done
