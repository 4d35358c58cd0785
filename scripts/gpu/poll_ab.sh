#!/usr/bin/env bash
# The go-fuse polling patch of two or more builds side by side, without S3:
# one and four direct-I/O readers of a memory-held file served by each
# build's bench/pushexp -mode direct (go-fuse as the daemon runs it) with
# -poll POLL, the builds taken in turn ROUNDS times. What differs between
# the builds' rates here is the patch, not the store or the splice path.
# Needs .dev/gpu (make gpu-bundle); other builds' pushexp in
# .dev/alt/pushexp-NAME.xz.
#
# BUILDS: one per line, "label|binary", binary "pushexp" (the bundle's) or
# pushexp-NAME of .dev/alt. Writes poll-ab.txt under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-poll-ab}
SIZE=${SIZE:-$((1 << 30))}
POLL=${POLL:-1ms}
ROUNDS=${ROUNDS:-2}
BUILDS=${BUILDS:-"this|pushexp"}
mkdir -p "$OUT"
BIN=$(mktemp -d)
for f in .dev/gpu/pushexp.xz .dev/alt/pushexp-*.xz; do
  [ -f "$f" ] || continue
  n=$(basename "${f%.xz}"); xz -dc "$f" > "$BIN/$n"; chmod +x "$BIN/$n"
done
MNT=$(mktemp -d)
qos_on() { :; }
qos_off() { :; }
trap 'umount -l "$MNT" 2>/dev/null || true' EXIT
source scripts/gpu/fuse_readers.sh

{
  echo "host: $(nproc) cores, kernel $(uname -r); -poll $POLL, $SIZE bytes"
  for round in $(seq "$ROUNDS"); do
    while IFS='|' read -r label binary; do
      [ -z "$label" ] && continue
      serve "round $round: $label" 0 X=1 -- "$BIN/$binary" -mode direct -poll "$POLL" -size "$SIZE"
    done <<< "$BUILDS"
  done
} 2>&1 | tee "$OUT/poll-ab.txt"
