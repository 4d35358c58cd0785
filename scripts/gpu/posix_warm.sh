#!/usr/bin/env bash
# Mount settings compared on a warm daemon: for each line of VARIANTS, one
# mount, an untimed warm-up read, then one reader of a fresh object (SIZE, 1 GiB) and
# four readers of four fresh ones (dd, 1 MiB reads, page cache dropped). For
# each it prints GB/s and how long FUSE reads waited in the daemon (the
# s3gdsfs_posix_read_seconds histogram): time a reader spent waiting for a
# block that was not downloaded yet. Needs .dev/gpu (make gpu-bundle).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-posix-warm}
SIZE=${SIZE:-$((1 << 30))}
source scripts/gpu/lib.sh
start_store
VARIANTS=${VARIANTS:-"
--initial-window 8MiB"}
nvar=$(printf '%s\n' "$VARIANTS" | wc -l)
upload w- $((6 * nvar)) "$SIZE" 900 > "$OUT/objects.json"

metrics() { python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:9737/metrics').read().decode())"; }

# timed FIRST N: N concurrent dd readers of objects FIRST..FIRST+N-1.
timed() {
  drop_page_cache
  metrics > "$OUT/m0"
  local t0 t1 i
  t0=$(date +%s.%N)
  read_parallel $(for i in $(seq "$1" $(($1 + $2 - 1))); do printf '%s/w-%04d\n' "$MP" "$i"; done)
  t1=$(date +%s.%N)
  metrics > "$OUT/m1"
  python3 - "$2" "$t0" "$t1" "$OUT/m0" "$OUT/m1" "$SIZE" <<'PY'
import sys
n, t0, t1, size = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[6])
def parse(path):
    out = {}
    for line in open(path):
        if line.startswith("s3gdsfs_posix_read_seconds"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out
a, b = parse(sys.argv[4]), parse(sys.argv[5])
d = {k: b[k] - a.get(k, 0) for k in b}
count = d["s3gdsfs_posix_read_seconds_count"]
fast = d['s3gdsfs_posix_read_seconds_bucket{le="1e-05"}']
dt = t1 - t0
print(f"{n * size / dt / 1e9:6.2f} GB/s  reads {count:.0f}, served within 10us {fast / count:6.1%}, "
      f"time in reads {d['s3gdsfs_posix_read_seconds_sum'] / n / dt:6.1%} of each reader's wall time")
PY
}

k=0
while IFS= read -r flags; do
  mount_s3gdsfs "s3gdsfs-$k.log" $flags
  base=$((6 * k))
  read_parallel "$(printf '%s/w-%04d' "$MP" "$base")" # warm-up
  echo "[$flags] one reader:   $(timed $((base + 1)) 1)"
  echo "[$flags] four readers: $(timed $((base + 2)) 4)"
  unmount_s3gdsfs
  k=$((k + 1))
done <<< "$VARIANTS"
