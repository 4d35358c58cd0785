#!/usr/bin/env bash
# Loaders from the mount under several builds and settings, in one run on one GPU machine,
# each against the bound measured in the same run (raw ranged GETs of the checkpoint, 64 MiB
# ranges, 16 streams) and the same programs on a tmpfs copy:
#   THREADS x CHUNK MiB preads into pinned memory, safetensors.torch.load_file(device="cuda"),
#   load_file onto the CPU and then each tensor to the device (loadcpu: load_state_dict, then .cuda()),
#   one thread of GPU-read ioctls in order (4 and 64 MiB), s3gds.load_safetensors.
# PROGRAMS picks which of load, preads, loadfile, loadcpu and ioctl each variant runs (default all), IOCTL_MIBS
# the sizes of the in-order ioctls (default 4 64; one at least the checkpoint's size is one call); LOADS
# loads with s3gds.load_safetensors on each mount (default 1, the fresh daemon's first).
# VARIANTS is a list of NAME=BUILD:FLAGS (BUILD: s3gdsfs, or a name under .dev/alt; FLAGS with
# commas for spaces). With PROFILE=NAME, that variant's daemon is CPU-profiled across its runs
# (--pprof), written to $OUT/NAME.pprof. The FUSE ceiling first: the same preads of a file of
# FUSEREAD_GIB GiB that bench/fuseread serves from memory (CEILING), and load_file of the
# checkpoint it serves from memory, mapped (LOADFILE_CEILING). Writes loaders.jsonl under $OUT, and
# where.txt: for the preads and load_file of each variant, the daemon's mean time per FUSE read
# (handler_ms: until its bytes were found; reply_ms: until the reply was written) and per GET;
# for its in-order GPU reads, the daemon's time per call (gpu_call_ms) and the part of it blocked
# on device copies (copy_wait_ms), against the reader's time per call (the bytes over GB/s).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-loaders}
GB=${GB:-8}
THREADS=${THREADS:-16}
CHUNK=${CHUNK:-64}
VARIANTS=${VARIANTS:-"base=s3gdsfs:"}
source scripts/gpu/lib.sh
unpack_alt_builds
install_wheels
export PYTHONUNBUFFERED=1
J=$OUT/loaders.jsonl; : > "$J"
start_store
CKPT=/dev/shm/models-ckpt.safetensors
python3 scripts/gpu/ml_bench.py gen --out $CKPT --gb "$GB"
python3 -c 'import boto3; boto3.client("s3", endpoint_url="'$EP'").create_bucket(Bucket="bench")' 2>/dev/null || true
python3 scripts/gpu/ml_bench.py upload --endpoint $EP --bucket bench --key ckpt.safetensors --file $CKPT
P=$MP/ckpt.safetensors
# counters LABEL: the daemon's counters of FUSE reads and GETs (the metrics' text) to $OUT/counters/LABEL.
counters() { mkdir -p "$OUT/counters"; curl -s http://127.0.0.1:9737/metrics | grep -E '^s3gdsfs_(fuse_read_repl|posix_read|s3_request_seconds|s3_received_bytes|block_|read_stream|fuse_requests_total|splice_bytes_total|splice_ends_total|splice_reorder_waits_total|gpu_read_seconds_(sum|count)|gpu_copy_wait_seconds_total|gpu_sched_wait_seconds_(sum|count)|gpu_read_ahead_(served_)?bytes_total)' > "$OUT/counters/$1" || true; }
# delta A B: what the counters moved between two snapshots, where the time of a FUSE read went.
delta() {
  python3 - "$OUT/counters/$1" "$OUT/counters/$2" "$2" <<'PY' | tee -a "$OUT/where.txt"
import sys
def load(p):
    d = {}
    for line in open(p):
        k, _, v = line.rpartition(" ")
        try: d[k] = float(v)
        except ValueError: pass
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
m = {k: b[k] - a.get(k, 0) for k in b if b[k] != a.get(k, 0)}
g = lambda k: m.get(k, 0.0)
n = g("s3gdsfs_fuse_read_replies_total")
out = {"label": sys.argv[3], "fuse_replies": n}
if n:
    out["reply_ms"] = round(1e3 * g("s3gdsfs_fuse_read_reply_seconds_total") / n, 3)
    out["handler_ms"] = round(1e3 * g("s3gdsfs_posix_read_seconds_sum") / max(g("s3gdsfs_posix_read_seconds_count"), 1), 3)
gets = sum(v for k, v in m.items() if k.startswith('s3gdsfs_s3_request_seconds_count{op="get"'))
if gets:
    out["gets"] = gets
    out["get_ms"] = round(1e3 * sum(v for k, v in m.items() if k.startswith('s3gdsfs_s3_request_seconds_sum{op="get"')) / gets, 3)
out["received_gb"] = round(g("s3gdsfs_s3_received_bytes_total") / 1e9, 3)
splices = sum(v for k, v in m.items() if k.startswith("s3gdsfs_splice_bytes_total"))
if splices:
    out["spliced_gb"] = round(splices / 1e9, 3)
if g("s3gdsfs_splice_reorder_waits_total"):
    out["reorder_waits"] = g("s3gdsfs_splice_reorder_waits_total")
ends = {k.split('"')[1]: v for k, v in m.items() if k.startswith("s3gdsfs_splice_ends_total{")}
if ends:
    out["splice_ends"] = ends
# GPU read calls: the daemon's time per call (from the ioctl's arrival to its bytes landed), the
# part of it blocked on device copies, and what readahead served.
calls = sum(v for k, v in m.items() if k.startswith("s3gdsfs_gpu_read_seconds_count"))
if calls:
    out["gpu_calls"] = calls
    out["gpu_call_ms"] = round(1e3 * sum(v for k, v in m.items() if k.startswith("s3gdsfs_gpu_read_seconds_sum")) / calls, 3)
    out["copy_wait_ms"] = round(1e3 * g("s3gdsfs_gpu_copy_wait_seconds_total") / calls, 3)
    out["ahead_served_gb"] = round(g("s3gdsfs_gpu_read_ahead_served_bytes_total") / 1e9, 3)
print(out)
PY
}
# has PROGRAM: whether PROGRAMS (default: all of load preads loadfile loadcpu ioctl) names it.
has() { [[ " ${PROGRAMS:-load preads loadfile loadcpu ioctl} " == *" $1 "* ]]; }
run() { local label=$1; shift; echo "-- $label $*"; CPU_PIDS="versitygw=$VGW daemon=${DAEMON:-}" python3 scripts/gpu/models.py "$@" --variant "$label" | tee -a "$J" || echo "{\"kind\":\"failed\",\"label\":\"$label\"}" | tee -a "$J"; }
bound() {
  "$BIN/s3load" get --endpoint $EP --bucket bench --keys ckpt.safetensors --part $((64 << 20)) --workers 16 \
    --seconds "${SECS:-5}" > "$OUT/bound.json"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({"kind":"bound","label":sys.argv[2],"gbps":r.get("gbps")}))' "$OUT/bound.json" "$1" | tee -a "$J"
}
echo "== references"
bound bound-first
# The host's copy rate (warm and cold memory) with as many threads as the preads: each byte a preading
# loader reads from the mount is copied at least twice on this host (socket to daemon, daemon to reader).
python3 scripts/gpu/host_copy.py --threads "$THREADS" --gib 4 | tee -a "$J" || true
run tmpfs preads --path $CKPT --local $CKPT --threads "$THREADS" --chunk-mib "$CHUNK"
run tmpfs loadfile --path $CKPT --local $CKPT
if has loadcpu; then run tmpfs loadcpu --path $CKPT --local $CKPT; fi
# The FUSE ceiling: the same preads of a file go-fuse serves from memory (bench/fuseread), with
# 1 MiB and 4 MiB requests: what any FUSE filesystem reaches on this machine.
# CEILING=0 leaves them out.
FR=/mnt/fuseread; mkdir -p $FR
[ "${CEILING:-1}" = 1 ] || FUSEREAD_MIBS=

OLD_PAGES=$(cat /proc/sys/fs/fuse/max_pages_limit 2>/dev/null || echo 256)
echo 1024 > /proc/sys/fs/fuse/max_pages_limit 2>/dev/null || true
# fuseread's spliced replies need pipes that hold 4 MiB, as the daemon's do (which raises the
# limit itself and starts again): without it they fail, and a mapping's reader gets SIGBUS.
OLD_PIPE=$(cat /proc/sys/fs/pipe-max-size)
[ "$OLD_PIPE" -ge $((16 << 20)) ] || echo $((16 << 20)) > /proc/sys/fs/pipe-max-size
for mr in ${FUSEREAD_MIBS-1 4}; do
  "$BIN/fuseread" --size $(( ${FUSEREAD_GIB:-4} << 30 )) --max-read $((mr << 20)) $FR 2> "$OUT/fuseread.log" &
  FRPID=$!
  for _ in $(seq 100); do [ -e $FR/f ] && break; sleep 0.1; done
  run "fuse-ceiling-${mr}m" preads --path $FR/f --local pattern --threads "$THREADS" --chunk-mib "$CHUNK"
  kill $FRPID; wait $FRPID 2>/dev/null || true; umount -l $FR 2>/dev/null || true
done
# load_file's ceiling: the checkpoint served from memory (spliced from a memfd, 4 MiB requests,
# a mapping of a direct-I/O file as the mount's), what a mapping's
# reader reaches through any FUSE filesystem here, with LOADFILE_RA_MIBS (1) MiB of kernel readahead
# each; LOADFILE_CEILING=0 leaves it out.
if [ "${LOADFILE_CEILING:-1}" = 1 ]; then
  for ra in ${LOADFILE_RA_MIBS:-1}; do
    "$BIN/fuseread" --file "$CKPT" --mode splice --read-ahead $((ra << 20)) --max-read $((4 << 20)) $FR 2> "$OUT/fuseread-loadfile.log" &
    FRPID=$!
    for _ in $(seq 300); do [ -e $FR/f ] && break; sleep 0.1; done
    drop_page_cache; run "fuse-ceiling-ra${ra}m" loadfile --path $FR/f --local $CKPT
    kill $FRPID; wait $FRPID 2>/dev/null || true; umount -l $FR 2>/dev/null || true
  done
fi
echo "$OLD_PAGES" > /proc/sys/fs/fuse/max_pages_limit 2>/dev/null || true
echo "$OLD_PIPE" > /proc/sys/fs/pipe-max-size
for v in $VARIANTS; do
  name=${v%%=*}; rest=${v#*=}; build=${rest%%:*}; flags=${rest#*:}; flags=${flags//,/ }
  echo "== $name: $build $flags"
  prof=; [ "${PROFILE:-}" = "$name" ] && prof=--pprof
  drop_page_cache
  S3GDSFS=$BIN/$build mount_s3gdsfs "$name.log" $prof $flags
  [ -n "$prof" ] && { curl -s -o "$OUT/$name.pprof" "http://127.0.0.1:9737/debug/pprof/profile?seconds=${PROFILE_SECS:-40}" & PROF_PID=$!; }
  if has load; then
    run "$name" load --path $P --local $CKPT
    # LOADS=N: N-1 more loads on the same mount, after the first (a fresh daemon's).
    for i in $(seq 2 "${LOADS:-1}"); do run "$name" load --path $P --local $CKPT --label "load_safetensors-$i"; done
  fi
  counters "$name-0"
  if has preads; then
    drop_page_cache; run "$name" preads --path $P --local $CKPT --threads "$THREADS" --chunk-mib "$CHUNK"
  fi
  counters "$name-preads"; delta "$name-0" "$name-preads"
  if has loadfile; then
    drop_page_cache; run "$name" loadfile --path $P --local $CKPT
  fi
  counters "$name-loadfile"; delta "$name-preads" "$name-loadfile"
  if has loadcpu; then
    drop_page_cache; run "$name" loadcpu --path $P --local $CKPT
  fi
  counters "$name-loadcpu"; delta "$name-loadfile" "$name-loadcpu"
  if has ioctl; then
    prev="$name-loadcpu"
    for c in ${IOCTL_MIBS:-4 64}; do
      run "$name" ioctl --path $P --local $CKPT --chunk-mib $c
      counters "$name-ioctl$c"; delta "$prev" "$name-ioctl$c"; prev="$name-ioctl$c"
    done
  fi
  [ -n "$prof" ] && wait $PROF_PID || true
  unmount_s3gdsfs | sed "s/^/$name /" | tee -a "$OUT/daemon_memory.txt"
done
bound bound-last
python3 - "$J" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
b = [r["gbps"] for r in rows if r.get("kind") == "bound" and r.get("gbps")]
bound = max(b) if b else None
print(f"bound (best of {len(b)}): {bound}")
for r in rows:
    if r.get("kind") == "host_copy":
        print(f'host copy, {r["threads"]} threads: {r["gbps"]} GB/s into warm memory, {r.get("cold_gbps")} into cold'); continue
    if r.get("kind") in ("bound", "failed"): continue
    g = r.get("gbps")
    c = r.get("cpu", {})
    per_gb = " ".join(f'{k[:-2]} {v / (r["bytes"] / 1e9):.3f}' for k, v in c.items() if k != "idle_s")
    print(f'{r.get("variant",""):10s} {r.get("kind",""):18s} {r.get("chunk_mib","") or "":>4} {g:7.2f} GB/s {g/bound if bound else 0:5.2f}x same={r.get("same")}'
          + (f"  CPU s/GB: {per_gb}" if per_gb else ""))
PY
# One archive for the counters' snapshots: a device run brings back a few files, not dozens.
if [ -d "$OUT/counters" ]; then tar czf "$OUT/counters.tgz" -C "$OUT" counters && rm -r "$OUT/counters"; fi
cat "$OUT/where.txt" 2>/dev/null || true
