# Shared set-up for the scripts that run on the GPU machine (sourced).
# Needs: OUT. Provides: BIN, EP, MP, start_store, upload, mount_s3gdsfs, unmount_s3gdsfs,
# unpack_alt_builds, install_wheels.
set -euo pipefail
mkdir -p "$OUT"
BIN=$(mktemp -d)
for f in .dev/gpu/*.xz; do
  n=$(basename "${f%.xz}")
  xz -dc "$f" > "$BIN/$n"
  chmod +x "$BIN/$n"
done
export AWS_ACCESS_KEY_ID=gpubench AWS_SECRET_ACCESS_KEY=gpubench-secret-$RANDOM$RANDOM AWS_REGION=us-east-1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
EP=http://127.0.0.1:7070
ROOT=/dev/shm/s3gdsfs-bench
MP=/mnt/s3gdsfs
DAEMON=
VGW=

cleanup() {
  unmount_s3gdsfs || true
  [ -n "$VGW" ] && kill "$VGW" 2>/dev/null || true
  rm -rf "$ROOT"
}
trap cleanup EXIT

# unpack_alt_builds: the builds to compare, .dev/alt/NAME.xz, as $BIN/NAME.
unpack_alt_builds() {
  local f
  for f in .dev/alt/*.xz; do
    [ -f "$f" ] || continue
    xz -dc "$f" > "$BIN/$(basename "${f%.xz}")" && chmod +x "$BIN/$(basename "${f%.xz}")"
  done
}

# install_wheels: the Python packages carried in .whl (the machine has no registry), under
# /tmp/site on PYTHONPATH.
install_wheels() {
  compgen -G ".whl/*.whl" > /dev/null || return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
}

# versitygw with its posix backend on /dev/shm, as the reference server.
start_store() {
  rm -rf "$ROOT"; mkdir -p "$ROOT/data" "$ROOT/meta" "$MP"
  # Connections are kept, as S3 services keep them; VGW_KEEPALIVE=0 gives versitygw's own default,
  # a connection per request, under which the GPU figures before keep-alive were taken.
  local keep=--keep-alive; [ "${VGW_KEEPALIVE:-1}" = 0 ] && keep=
  "$BIN/versitygw" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --region us-east-1 \
    --port 127.0.0.1:7070 --quiet $keep posix --sidecar "$ROOT/meta" "$ROOT/data" > "$OUT/versitygw.log" 2>&1 &
  VGW=$!
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/7070) 2>/dev/null && return 0; sleep 0.1; done
  echo "versitygw did not start"; cat "$OUT/versitygw.log"; return 1
}

# upload PREFIX COUNT SIZE SEED > manifest
upload() {
  "$BIN/s3load" put --endpoint $EP --bucket bench --prefix "$1" --count "$2" --size "$3" --seed "$4"
}

# drop_page_cache: later reads go through the mount, not the kernel's cache.
drop_page_cache() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# read_parallel FILE...: one dd per file, 1 MiB reads, all at once; waits for all.
read_parallel() {
  local pids=() f
  for f in "$@"; do dd if="$f" of=/dev/null bs=1M status=none & pids+=($!); done
  wait "${pids[@]}"
}

keys_of() {
  python3 -c 'import json,sys; print(",".join(o["key"] for o in json.load(open(sys.argv[1]))["objects"]))' "$1"
}

# mount_s3gdsfs LOGNAME [flags...]
mount_s3gdsfs() {
  local log=$1; shift
  "${S3GDSFS:-$BIN/s3gdsfs}" mount --endpoint $EP --bucket bench --metrics-addr 127.0.0.1:9737 "$@" "$MP" > "$OUT/$log" 2>&1 &
  DAEMON=$!
  for _ in $(seq 100); do mountpoint -q "$MP" && return 0; sleep 0.1; done
  cat "$OUT/$log"; return 1
}

# unmount_s3gdsfs: stops the daemon and prints its peak memory.
unmount_s3gdsfs() {
  [ -z "$DAEMON" ] && return 0
  grep -E '^VmHWM' /proc/$DAEMON/status || true
  kill -INT "$DAEMON" 2>/dev/null || true
  wait "$DAEMON" 2>/dev/null || true
  DAEMON=
  umount -l "$MP" 2>/dev/null || true
}
