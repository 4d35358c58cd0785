#!/usr/bin/env bash
# The POSIX benchmark (bench/, as `make bench`, without the peers) once per
# variant of the mount, the variants taken in turn ROUNDS times so that a
# drift of the machine shows in every variant alike. Each bench run measures
# its own raw reference. Needs .dev/gpu (make gpu-bundle) and
# .dev/posix/bench.xz and fusermount3.xz (make posix-bundle); a second build
# to compare goes in .dev/alt/s3gdsfs.xz.
#
# VARIANTS: one per line, "label|binary|mount flags|environment", binary
# "s3gdsfs" (the bundle's), "alt" (.dev/alt/s3gdsfs.xz) or the name of another
# build in .dev/alt (.dev/alt/NAME.xz); the environment (optional, NAME=value
# words) is the bench's and so the daemon's, for builds that read settings
# from it. Writes variants.txt (every run's table) and
# summary.txt (one line per run) under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-posix-variants}
ROUNDS=${ROUNDS:-2}
BENCH_FLAGS=${BENCH_FLAGS:--runs 3}
mkdir -p "$OUT"
P=$(mktemp -d)
for f in .dev/gpu/s3gdsfs.xz .dev/gpu/versitygw.xz .dev/posix/bench.xz .dev/posix/fusermount3.xz; do
  n=$(basename "${f%.xz}")
  xz -dc "$f" > "$P/$n"
  chmod +x "$P/$n"
done
for f in .dev/alt/*.xz; do
  [ -f "$f" ] || continue
  n=$(basename "${f%.xz}"); [ "$n" = s3gdsfs ] && n=alt
  xz -dc "$f" > "$P/$n" && chmod +x "$P/$n"
done
ln -sf fusermount3 "$P/fusermount"
export PATH="$P:$PATH" VERSITYGW="$P/versitygw"
echo "host: $(nproc) cores, $(awk '/MemTotal/ {print int($2/1048576) " GiB"}' /proc/meminfo), kernel $(uname -r)" | tee "$OUT/summary.txt"

for round in $(seq "$ROUNDS"); do
  while IFS='|' read -r label binary flags envs; do
    [ -z "$label" ] && continue
    run=$(mktemp -d)
    echo "=== round $round: $label ($binary $flags${envs:+, env $envs})" | tee -a "$OUT/variants.txt"
    # shellcheck disable=SC2086 # BENCH_FLAGS and envs are lists of words
    env $envs "$P/bench" -bin "$P/$binary" -out "$run" -skip-peers $BENCH_FLAGS -s3gdsfs-flags "$flags" > "$run/stdout" 2>&1 ||
      { echo "bench failed:"; tail -20 "$run/stdout"; } | tee -a "$OUT/variants.txt"
    [ -f "$run/posix.txt" ] && cat "$run/posix.txt" >> "$OUT/variants.txt"
    # One line: the medians of raw single, raw four, s3gdsfs single and four, and the two ratios.
    awk -v r="$round" -v l="$label" '
      $6!="true" && $6!="false" {next} # table rows only
      $1=="raw" && $2=="single" {rs=$3} $1=="raw" && $2=="four" {rf=$3}
      $1=="s3gdsfs" && $2=="single" {ss=$3; sc=$7} $1=="s3gdsfs" && $2=="four" {sf=$3; fc=$7}
      END { if (rs && rf) printf "round %s %-28s raw %s / %s  s3gdsfs %s / %s  ratios %.2f / %.2f  cpu %s / %s\n", r, l, rs, rf, ss, sf, ss/rs, sf/rf, sc, fc }
    ' "$run/posix.txt" 2>/dev/null | tee -a "$OUT/summary.txt"
    rm -rf "$run"
  done <<< "$VARIANTS"
done
