#!/usr/bin/env bash
# The POSIX benchmark (bench/, the same program as `make bench`) on a machine
# with more cores and no Go or package registry, such as the GPU machines.
# Needs .dev/gpu (make gpu-bundle) and .dev/posix (make posix-bundle).
# Writes posix.json, posix.txt and the mounts' logs under $OUT.
# BENCH_FLAGS: flags for the bench (default: -runs 3, a warm mount reading fresh objects each run).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-posix}
mkdir -p "$OUT"
P=$(mktemp -d)
for f in .dev/gpu/*.xz .dev/posix/*.xz; do
  n=$(basename "${f%.xz}")
  xz -dc "$f" > "$P/$n"
  chmod +x "$P/$n"
done
tar -C "$P" -xf "$P/lib.tar" && rm "$P/lib.tar"

# s3fs was linked on Debian: give it the libraries it came with (beyond
# glibc, which the host provides in a newer version).
mv "$P/s3fs" "$P/s3fs.bin"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/s3fs.bin "$@"\n' "$P" "$P" > "$P/s3fs"
chmod +x "$P/s3fs"
ln -sf fusermount3 "$P/fusermount"
export PATH="$P:$PATH" VERSITYGW="$P/versitygw"

{
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {print int($2/1048576) " GiB"}' /proc/meminfo), kernel $(uname -r)"
  echo "rclone: $(rclone version 2>&1 | head -1)"
  echo "s3fs: $(s3fs --version 2>&1 | head -1)"
  ls -l /dev/fuse
} | tee "$OUT/host.txt"

"$P/bench" -bin "$P/s3gdsfs" -out "$OUT" ${BENCH_FLAGS:--runs 3}
