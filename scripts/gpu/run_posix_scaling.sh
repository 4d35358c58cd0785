#!/usr/bin/env bash
# The POSIX scaling benchmark (scripts/bench_scaling.sh, `make bench-scaling`)
# on a machine without Go, such as the GPU machines: N = 1, 2, 4, 8 processes
# x 8 threads through one mount against raw GETs. Needs .dev/gpu
# (make gpu-bundle). MOUNT_FLAGS: extra flags for the mount.
OUT=${OUT:-/tmp/s3gdsfs-posix-scaling}
source scripts/gpu/lib.sh # unpacks the bundle into $BIN
OUT=$OUT BINDIR=$BIN VERSITYGW=$BIN/versitygw scripts/bench_scaling.sh
