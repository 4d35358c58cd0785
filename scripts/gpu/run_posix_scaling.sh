#!/usr/bin/env bash
# The POSIX scaling benchmark (scripts/bench_scaling.sh, `make bench-scaling`)
# on a machine without Go, such as the GPU machines: N = 1, 2, 4, 8 processes
# x 8 threads through one mount against raw GETs. Needs .dev/gpu
# (make gpu-bundle). MOUNT_FLAGS: extra flags for the mount.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-posix-scaling}
P=$(mktemp -d)
for f in .dev/gpu/*.xz; do
  n=$(basename "${f%.xz}")
  xz -dc "$f" > "$P/$n"
  chmod +x "$P/$n"
done
OUT=$OUT BINDIR=$P VERSITYGW=$P/versitygw scripts/bench_scaling.sh
