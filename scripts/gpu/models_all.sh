#!/usr/bin/env bash
# Every figure of loading models on a GPU machine (docs/benchmarks.md, "Loading models"), in parts
# that each fit one command of about ten minutes (check: seconds); PART picks one, and each
# writes under $OUT/PART:
#   models   scripts/gpu/models.sh: an 8 GB checkpoint through every loader (s3gds.load_safetensors
#            fresh and later, in-order GPU reads, parallel preads, load_file, kvikio, GdsFile),
#            transformers' from_pretrained of a 6 GB model directory, the kvikio RemoteFile peer;
#   sharded  a 32 GB checkpoint in 4 shards (SHARDED_GB, SHARDS) loaded by its index;
#   share    scripts/gpu/share_bench.sh: 8 processes loading the same objects, shared and not;
#   loaders  scripts/gpu/loaders_ab.sh: load_file against its FUSE ceiling (1 and 4 MiB of kernel
#            readahead) and with --read-ahead 4MiB, beside s3gds.load_safetensors and in-order
#            GPU reads, each setting on two fresh mounts (VARIANTS to change them, LOADFILE_CEILING=0
#            to leave the ceiling out);
#   peers    scripts/gpu/ml_bench.sh without its dataset: Run:ai's model streamer from S3 beside
#            load_safetensors and load_file;
#   check    the CUDA backend's tests on the device (cufile-cuda.test from make gpu-bundle):
#            byte-exact copies, imports from another process, slots through twins.
# Needs .dev/gpu (make gpu-bundle) and the wheels in .whl (README of the GPU machine's set-up).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-models-all}
case ${PART:-} in
  models) OUT=$OUT/models GB=${GB:-8} MODEL_GB=${MODEL_GB:-6} scripts/gpu/models.sh ;;
  sharded) OUT=$OUT/sharded GB=1 MODEL_GB=0 SHARDED_GB=${SHARDED_GB:-32} scripts/gpu/models.sh ;;
  share) OUT=$OUT/share ROUNDS=${ROUNDS:-2} scripts/gpu/share_bench.sh ;;
  loaders)
    OUT=$OUT/loaders GB=${GB:-4} PROGRAMS=${PROGRAMS:-"load loadfile loadcpu ioctl"} CEILING=0 LOADFILE_CEILING=${LOADFILE_CEILING:-1} \
      LOADFILE_RA_MIBS=${LOADFILE_RA_MIBS:-"1 4"} \
      VARIANTS=${VARIANTS:-"base=s3gdsfs: ra4=s3gdsfs:--read-ahead=4MiB base2=s3gdsfs: ra42=s3gdsfs:--read-ahead=4MiB"} \
      scripts/gpu/loaders_ab.sh ;;
  peers) OUT=$OUT/peers DATASET=0 ROUNDS=${ROUNDS:-2} GB=${GB:-8} scripts/gpu/ml_bench.sh ;;
  check)
    OUT=$OUT/check
    source scripts/gpu/lib.sh
    "$BIN/cufile-cuda.test" -test.v -test.count 1 2>&1 | tee "$OUT/cufile-cuda.txt" ;;
  *) echo "PART: one of models, sharded, share, loaders, peers, check" >&2; exit 2 ;;
esac
