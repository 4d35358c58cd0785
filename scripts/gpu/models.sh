#!/usr/bin/env bash
# The programs that load models, on a GPU machine, against versitygw on /dev/shm, each
# measured against the bound of one object on this server in the same run: raw ranged GETs of
# the checkpoint with 8 and 16 streams of 64 MiB (s3load). One safetensors checkpoint of GB GB:
#   - s3gds.load_safetensors: the first load on a freshly started mount, then two more;
#   - one thread of GPU-read ioctls in order, 4 MiB and 64 MiB, with the daemon's readahead and
#     without it (--gpu-read-ahead 0, on a mount of its own at the end);
#   - THREADS threads of CHUNK MiB preads into pinned memory, from the mount and from tmpfs;
#   - safetensors.torch.load_file(device="cuda"), from the mount and from tmpfs;
#   - kvikio's CuFile.pread at its defaults (KVIKIO_COMPAT_MODE=OFF) with libs3gdsfs_cufile.so as
#     libcufile.so.0, and
#     in its compatibility mode (POSIX reads, no GPU path);
#   - torch.cuda.gds.GdsFile.load_storage with the library preloaded;
#   - a peer, kvikio.RemoteFile.open_s3 reading the object from the server into device memory;
#   - with MODEL_GB (default 6; 0: none): a Llama-shaped model directory of that size in
#     MODEL_SHARDS (4) shards, transformers' from_pretrained(device_map="cuda") of it from the mount
#     and from its local copy on tmpfs;
#   - with SHARDED_GB (and SHARDS, 4): a sharded checkpoint of that size, s3gds.load_safetensors of
#     its index twice, against raw ranged GETs of its shards.
# Every byte is compared with the local copy; the page cache is dropped before each read
# through the mount. Needs .dev/gpu (make gpu-bundle) and the wheels in .whl for kvikio.
# Writes models.jsonl and the daemon's log and metrics under $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-models}
GB=${GB:-8}
THREADS=${THREADS:-16}
CHUNK=${CHUNK:-64}
source scripts/gpu/lib.sh
install_wheels
export PYTHONUNBUFFERED=1
J=$OUT/models.jsonl; : > "$J"
start_store
CKPT=/dev/shm/models-ckpt.safetensors
python3 scripts/gpu/ml_bench.py gen --out $CKPT --gb "$GB"
python3 -c 'import boto3; boto3.client("s3", endpoint_url="'$EP'").create_bucket(Bucket="bench")' 2>/dev/null || true
python3 scripts/gpu/ml_bench.py upload --endpoint $EP --bucket bench --key ckpt.safetensors --file $CKPT

echo "== the bound: raw ranged GETs of the checkpoint, 64 MiB ranges"
for w in 8 16; do
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys ckpt.safetensors --part $((64 << 20)) --workers $w \
    --seconds "${SECS:-6}" | tee -a "$OUT/bound$w.json"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({"kind":"bound","workers":int(sys.argv[2]),"gbps":r.get("gbps")}))' \
    "$OUT/bound$w.json" "$w" >> "$J" || true
done

run() { echo "-- $*"; python3 scripts/gpu/models.py "$@" | tee -a "$J" || echo "{\"kind\":\"failed\",\"args\":\"$*\"}" | tee -a "$J"; }
P=$MP/ckpt.safetensors

drop_page_cache
mount_s3gdsfs models.log ${MOUNT_FLAGS:-}
echo "== s3gds.load_safetensors, the first on a fresh mount"
for i in 1 2 3; do drop_page_cache; run load --path $P --local $CKPT; done
echo "== GPU-read ioctls in order, one thread"
for c in 4 64; do run ioctl --path $P --local $CKPT --chunk-mib $c; done
echo "== preads into pinned memory, $THREADS threads of $CHUNK MiB"
drop_page_cache; run preads --path $P --local $CKPT --threads "$THREADS" --chunk-mib "$CHUNK"
run preads --path $CKPT --local $CKPT --threads "$THREADS" --chunk-mib "$CHUNK"
echo "== safetensors.torch.load_file"
drop_page_cache; run loadfile --path $P --local $CKPT
run loadfile --path $CKPT --local $CKPT
echo "== kvikio CuFile.pread"
# NVIDIA's libcufile: the nvidia-cufile wheel's, or the CUDA toolkit's.
REAL=$(find / -xdev -name 'libcufile.so.0' -not -path '*/s3gdsfs*' -not -path '/tmp/*' 2>/dev/null | head -1 || true)
drop_page_cache
# kvikio loads the libcufile.so.0 of NVIDIA's wheel itself, so the library goes in ahead of it
# under that soname; kvikio takes cuFile only where /run/udev exists, which containers often
# lack, so OFF asks for it (docs/cufile-preload.md). At its defaults it reads in 4 MiB tasks.
LD_PRELOAD=$BIN/libcufile.so.0 S3GDSFS_CUFILE_REAL=$REAL KVIKIO_COMPAT_MODE=OFF \
  run kvikio --path $P --local $CKPT
drop_page_cache
KVIKIO_COMPAT_MODE=ON run kvikio --path $P --local $CKPT
echo "== torch.cuda.gds.GdsFile.load_storage with the library preloaded"
drop_page_cache
LD_PRELOAD=$BIN/libs3gdsfs_cufile.so run gds --path $P --local $CKPT
echo "== a peer: kvikio.RemoteFile from S3, without the mount"
run remote --path s3://bench/ckpt.safetensors --local $CKPT --endpoint $EP

if [ "${MODEL_GB:-6}" != 0 ]; then
  echo "== transformers from_pretrained of a model directory of $MODEL_GB GB: the mount, then tmpfs"
  MD=/dev/shm/models-model
  python3 scripts/gpu/models.py genmodel --out $MD --gb "$MODEL_GB" --shards "${MODEL_SHARDS:-4}" | tee -a "$J"
  for f in $MD/*; do
    python3 scripts/gpu/ml_bench.py upload --endpoint $EP --bucket bench --key "model/$(basename "$f")" --file "$f"
  done
  drop_page_cache; run pretrained --path $MP/model --local $MD
  run pretrained --path $MD --local $MD --label from_pretrained_local
  drop_page_cache; run pretrained --path $MP/model --local $MD --label from_pretrained-2
  run pretrained --path $MD --local $MD --label from_pretrained_local-2
  rm -rf $MD "$ROOT/data/bench/model"
fi
python3 -c 'import urllib.request; open("'"$OUT"'/metrics.txt","w").write(urllib.request.urlopen("http://127.0.0.1:9737/metrics").read().decode())' || true
unmount_s3gdsfs | tee "$OUT/daemon_memory.txt"
echo "== GPU-read ioctls in order without readahead (--gpu-read-ahead 0), the reference"
mount_s3gdsfs models-noahead.log --gpu-read-ahead 0 ${MOUNT_FLAGS:-}
for c in 4 64; do run ioctl --path $P --local $CKPT --chunk-mib $c --label ioctl-noahead; done
unmount_s3gdsfs > /dev/null
if [ "${SHARDED_GB:-0}" != 0 ]; then
  SHARDS=${SHARDS:-4}
  echo "== a sharded checkpoint, $SHARDED_GB GB in $SHARDS shards: s3gds.load_safetensors of its index"
  # Room in memory: the single checkpoint's local copy and object go first.
  rm -f "$CKPT" "$ROOT/data/bench/ckpt.safetensors"
  SH=/dev/shm/models-sharded
  python3 scripts/gpu/ml_bench.py gen --out $SH --gb "$SHARDED_GB" --shards "$SHARDS"
  keys=
  for f in $SH/*; do
    python3 scripts/gpu/ml_bench.py upload --endpoint $EP --bucket bench --key "sharded/$(basename "$f")" --file "$f"
    case $f in *.safetensors) keys=${keys:+$keys,}sharded/$(basename "$f");; esac
  done
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys "$keys" --part $((64 << 20)) --workers 16 \
    --seconds "${SECS:-6}" > "$OUT/bound_sharded.json"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({"kind":"bound_sharded","workers":16,"gbps":r.get("gbps")}))' \
    "$OUT/bound_sharded.json" | tee -a "$J"
  drop_page_cache
  mount_s3gdsfs models-sharded.log ${MOUNT_FLAGS:-}
  for i in 1 2; do
    drop_page_cache
    run load --path $MP/sharded/model.safetensors.index.json --local $SH/model.safetensors.index.json --label load_sharded
  done
  unmount_s3gdsfs > /dev/null
fi
python3 - "$J" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
bound = max((r["gbps"] or 0) for r in rows if r.get("kind") == "bound")
sharded = max([r["gbps"] or 0 for r in rows if r.get("kind") == "bound_sharded"] or [0])
print(f"\nbound (best raw ranged GETs of the object): {bound:.2f} GB/s" + (f"; of the shards: {sharded:.2f}" if sharded else ""))
for r in rows:
    if r.get("kind") in ("bound", "bound_sharded", "failed") or "gbps" not in r:
        print(r); continue
    b = sharded if r.get("kind") == "load_sharded" and sharded else bound
    extra = " ".join(f"{k}={r[k]}" for k in ("chunk_mib", "threads", "compat", "task_size") if k in r)
    print(f"{r['kind']:17s} {r['path'][-40:]:40s} {extra:28s} {r['gbps']:7.2f} GB/s  x{r['gbps'] / b:.2f} bound  same={r['same']}")
PY
