#!/usr/bin/env bash
# The GPU path's benchmark on a GPU machine, every figure against references
# measured in the same run on the same server (versitygw on /dev/shm):
#   - raw minio-go GETs of whole objects with the same total streams (s3load),
#     and into a cold 256 MiB ring per worker (the bound a cold destination sets);
#   - the same GETs landed in device memory through pinned slots by s3load itself
#     (--device 0): the GPU path's design without the daemon;
#   - the GPU HTTP path, N = PROCS processes x 8 threads, 256 MiB objects
#     (and 64 MiB objects for operations per second), then 768 MiB objects;
#   - POSIX reads of the same mount into pinned host memory plus a device copy;
#   - the loopback RDMA path;
#   - peers landing the same objects in device memory (scripts/gpu/peers.py:
#     kvikio, s3torchconnector, boto3), when their wheels are in .whl;
#   - VARIANTS: mount flags to compare, one set per line;
#   - BASELINE=NAME: the same GPU runs with the build .dev/alt/NAME.xz.
# Needs .dev/gpu (make gpu-bundle). Writes JSON per path, summary.json,
# summary.md and gpu-bench.png under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-gpu-bench}
SECS=${SECS:-5}
PROCS=${PROCS:-1,2,4,8}
FEW=${FEW:-1,8} # process counts for the second object size, ops and references
THREADS=8
source scripts/gpu/lib.sh
unpack_alt_builds
install_wheels
{ nproc; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; } | tee "$OUT/host.txt"

start_store
upload big- 16 $((256 << 20)) 100 > "$OUT/big.json"
upload mid- 32 $((64 << 20)) 300 > "$OUT/mid.json"
upload huge- 8 $((768 << 20)) 500 > "$OUT/huge.json"

# raw DIR MANIFEST NAME WORKERS [flags]: one s3load reference, named as scaling.py finds it.
raw() {
  mkdir -p "$OUT/$1"
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$(keys_of "$OUT/$2")" --workers "$4" --seconds "$SECS" "${@:5}" > "$OUT/$1/raw_$3_$4.json"
  echo "raw $1 $3 $4 workers: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f GB/s %.1f ops/s" % (d["gbps"], d["ops_per_s"]))' "$OUT/$1/raw_$3_$4.json")"
}
for n in ${PROCS//,/ }; do
  raw raw big.json big $((n * THREADS))
  raw raw mid.json mid $((n * THREADS))
  # The GPU path's design without the daemon: the same GETs into the same pinned slots, each
  # copied to a device buffer of the worker's. What the daemon can reach on this host.
  raw bound big.json big $((n * THREADS)) --device 0 || { echo "bound at N=$n: failed"; rm -f "$OUT/bound/raw_big_$((n * THREADS)).json"; }
done
for n in ${FEW//,/ }; do raw raw768 huge.json big $((n * THREADS)); done
raw cold big.json big $THREADS --ring 256
# The same into rings of a staging copier's size: what the destination's
# temperature alone costs at that size.
for r in 8 4; do raw "cold$r" big.json big $THREADS --ring $r; done

# gpu_run LABEL PATH MANIFEST RAWDIR PROCS [scaling.py flags]
gpu_run() {
  python3 scripts/scaling.py --path "$2" --mount "$MP" --manifest "$OUT/$3" --procs "$5" --threads $THREADS \
    --seconds "$SECS" --raw-dir "$OUT/$4" --label "$1" --out "$OUT/$1.json" "${@:6}"
}
mount_s3gdsfs s3gdsfs-http.log
gpu_run gpu-http gpu big.json raw "$PROCS" --ops-manifest "$OUT/mid.json"
gpu_run gpu-http-768 gpu huge.json raw768 "$FEW"
gpu_run posix-copy posix-copy big.json raw "$FEW"
unmount_s3gdsfs | tee "$OUT/peak-http.txt"

mount_s3gdsfs s3gdsfs-rdma.log --rdma=loopback
gpu_run gpu-rdma gpu big.json raw "$PROCS"
unmount_s3gdsfs | tee "$OUT/peak-rdma.txt"

# VARIANTS: mount flags to compare at N=1 and the last of FEW, one set per line.
i=0
while IFS= read -r flags; do
  [ -z "$flags" ] && continue
  i=$((i + 1))
  # shellcheck disable=SC2086 # flags is a list of words
  mount_s3gdsfs "s3gdsfs-variant-$i.log" $flags < /dev/null
  echo "variant $i: $flags" | tee -a "$OUT/variants.txt"
  gpu_run "variant-$i" gpu big.json raw "$FEW" < /dev/null
  unmount_s3gdsfs > /dev/null
done <<< "${VARIANTS:-}"

if [ -n "${BASELINE:-}" ]; then
  S3GDSFS=$BIN/$BASELINE mount_s3gdsfs s3gdsfs-baseline.log
  gpu_run "gpu-http-$BASELINE" gpu big.json raw "$FEW"
  unmount_s3gdsfs > /dev/null
fi

for peer in ${PEERS:-kvikio s3torchconnector boto3}; do
  KVIKIO_NTHREADS=$THREADS python3 scripts/gpu/peers.py --peer "$peer" --endpoint $EP --bucket bench --manifest "$OUT/big.json" \
    --procs "$FEW" --threads $THREADS --seconds "$SECS" --out "$OUT/peer-$peer.json" || echo "peer $peer: failed"
done

# Tear the server down before the report, which needs no more of it.
python3 scripts/gpu/gpu_bench_report.py "$OUT"
