#!/usr/bin/env bash
# GPU-read variants side by side on a GPU machine (scripts/gpu/gpu_ab.py): each variant is its own
# daemon on its own mountpoint, all mounted at once, and the trials alternate between them and raw
# GETs, ROUNDS rounds of SECS seconds at each process count in PROCS, objects of SIZE_MIB MiB (256;
# 64 for operations per second).
#   VARIANTS: one per line, "NAME BUILD [mount flags...]"; BUILD is s3gdsfs (this build) or the
#   name of a build in .dev/alt/NAME.xz; a variable assignment before NAME (X=1 NAME BUILD ...)
#   is set in that daemon's environment.
#   RING=N adds raw GETs into a ring of N 1 MiB buffers per worker (s3load --ring).
#   DEVICE_RAW=1 adds s3load landing the bodies in device memory through pinned slots as the daemon
#   does, without the daemon (--device 0), and the same with the slots filled and not copied
#   (--device-copy=false).
#   RAWS: more raw references, one per line, "NAME s3load get flags...", e.g.
#   "dev-1m --device 0 --slot-size 1048576" (endpoint, bucket, keys, workers
#   and seconds are given).
#   COUNT objects (16); DISTINCT=1: no two threads read one object at once (COUNT >= threads);
#   PROFILE=0: no CPU profiles (profiling costs the variants of round 0 a little).
# Writes ab.json and ab.txt, and the daemons' CPU profiles of round 0 in prof.tgz, under $OUT;
# prints each daemon's pinned staging memory and peak RSS at the end.
set -uo pipefail
OUT=${OUT:-/tmp/s3gdsfs-gpu-ab}
SECS=${SECS:-5}; ROUNDS=${ROUNDS:-3}; PROCS=${PROCS:-1,8}
VARIANTS=${VARIANTS:-"defaults s3gdsfs"}
source scripts/gpu/lib.sh
unpack_alt_builds
start_store
upload big- "${COUNT:-16}" $((${SIZE_MIB:-256} << 20)) 100 > "$OUT/big.json"
pids=(); args=(); port=9741
while read -r line; do
  [ -z "$line" ] && continue
  read -ra words <<< "$line"
  envs=(); while [[ ${words[0]} == *=* ]]; do envs+=("${words[0]}"); words=("${words[@]:1}"); done
  name=${words[0]} build=${words[1]}; flags=("${words[@]:2}")
  mkdir -p "/mnt/ab-$name"
  # Profiles are served only with --pprof (builds before it served them anyway).
  pp=(); if [ "${PROFILE:-1}" != 0 ] && "$BIN/$build" mount --help-all 2>/dev/null | grep -q -- --pprof; then pp=(--pprof); fi
  env "${envs[@]}" "$BIN/$build" mount --endpoint $EP --bucket bench --metrics-addr 127.0.0.1:$port "${pp[@]}" "${flags[@]}" \
    "/mnt/ab-$name" > "$OUT/d-$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do mountpoint -q "/mnt/ab-$name" && break; sleep 0.1; done
  mountpoint -q "/mnt/ab-$name" || { echo "mount $name failed"; cat "$OUT/d-$name.log"; exit 1; }
  pids+=($pid); args+=(--variant "$name=/mnt/ab-$name=$pid=http://127.0.0.1:$port"); port=$((port + 1))
done <<< "$VARIANTS"
mkdir -p "$OUT/prof"
raws=(--raw "raw=--endpoint $EP --bucket bench")
[ -n "${RING:-}" ] && raws+=(--raw "raw-ring$RING=--endpoint $EP --bucket bench --ring $RING")
[ -n "${DEVICE_RAW:-}" ] && raws+=(--raw "raw-device=--endpoint $EP --bucket bench --device 0" \
  --raw "raw-pinned=--endpoint $EP --bucket bench --device 0 --device-copy=false")
while read -r name flags; do
  [ -n "$name" ] && raws+=(--raw "$name=--endpoint $EP --bucket bench $flags")
done <<< "${RAWS:-}"
PYTHONUNBUFFERED=1 python3 scripts/gpu/gpu_ab.py "${args[@]}" "${raws[@]}" \
  --manifest "$OUT/big.json" --procs "$PROCS" --seconds "$SECS" --rounds "$ROUNDS" --vgw-pid "$VGW" \
  --s3load "$BIN/s3load" --out "$OUT/ab.json" ${DISTINCT:+--distinct} \
  $([ "${PROFILE:-1}" = 0 ] || echo --profile-dir "$OUT/prof") 2>&1 | tee "$OUT/ab.txt"
for ((i = 0; i < ${#pids[@]}; i++)); do
  p=${pids[$i]}
  python3 -c 'import sys, urllib.request as u
print(*[l for l in u.urlopen(sys.argv[1]).read().decode().splitlines() if l.startswith("s3gdsfs_gpu_staging_pinned_bytes")])' \
    "http://127.0.0.1:$((9741 + i))/metrics" || true
  grep VmHWM /proc/$p/status; kill -INT $p
done
wait "${pids[@]}" 2>/dev/null || true  # a daemon stopped by SIGINT may exit non-zero
for d in /mnt/ab-*; do umount -l "$d" 2>/dev/null || true; done
(cd "$OUT" && tar -czf prof.tgz prof d-*.log && rm -rf prof d-*.log)
