#!/usr/bin/env bash
# Where the daemon's CPU goes while one reader, then four, stream objects
# through the mount: a Go CPU profile (/debug/pprof/profile on the metrics
# listener) of each build in BUILDS while dd reads fresh objects with 1 MiB
# reads (direct I/O, so every read is a FUSE request), each dd's rate
# beside it, and ten times a second the system calls the daemon's threads
# are in (how many poll, sleep, reply). Samples include the time the daemon's threads spend inside
# system calls, under the call's frame (splice, read of /dev/fuse,
# sched_yield). Needs .dev/gpu (make gpu-bundle); builds to compare go in
# .dev/alt/NAME.xz.
#
# BUILDS: one per line, "label|binary|mount flags", binary "s3gdsfs" (the
# bundle's) or NAME of .dev/alt/NAME.xz. COUNT objects of SIZE bytes are read
# by each build, one at a time and then four at once. Writes LABEL-single.pprof,
# LABEL-four.pprof, LABEL-*.threads and profile.txt (rates, the daemon's FUSE
# counters) under
# $OUT; read a profile with `go tool pprof -top FILE` (it carries its symbols).
set -euo pipefail
OUT=${OUT:-/tmp/s3gdsfs-posix-profile}
BUILDS=${BUILDS:-"default|s3gdsfs|"}
COUNT=${COUNT:-16}
SIZE=${SIZE:-$((1 << 30))}
source scripts/gpu/lib.sh
unpack_alt_builds
echo "host: $(nproc) cores, kernel $(uname -r); $COUNT objects of $SIZE bytes per build" | tee "$OUT/profile.txt"
start_store
upload prof- "$COUNT" "$SIZE" 91 > "$OUT/objects.json"
[ "$COUNT" -ge 4 ] || { echo "COUNT must be at least 4"; exit 2; }

get() { python3 -c "import urllib.request,sys; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=120).read())" "$1"; }
# counters: the daemon's FUSE request counters, one line.
counters() {
  get http://127.0.0.1:9737/metrics | awk '/^s3gdsfs_fuse_(requests|wakeups_beside_pollers)_total/ {printf "%s %s  ", $1, $2} END {print ""}'
}
# rate DD_STDERR_FILE: dd's own GB/s figure (its last line).
rate() { tail -1 "$1" | awk '{print $(NF-1), $NF}'; }
# threads_now: what the daemon's threads are doing, by system call (x86-64
# numbers named: polling threads are in read or sched_yield, the sleeper
# in ppoll, threads parked by Go in futex, repliers in splice or write).
threads_now() {
  local t nr
  declare -A n=()
  for t in /proc/"$DAEMON"/task/*; do
    nr=$(cut -d' ' -f1 "$t/syscall" 2>/dev/null) || continue
    case "$nr" in
      0) nr=read ;; 1) nr=write ;; 24) nr=sched_yield ;; 202) nr=futex ;; 271) nr=ppoll ;;
      275) nr=splice ;; 281) nr=epoll_pwait ;; 35) nr=nanosleep ;; 20) nr=writev ;;
    esac
    n[$nr]=$((${n[$nr]:-0} + 1))
  done
  for nr in "${!n[@]}"; do printf '%s %s, ' "$nr" "${n[$nr]}"; done
  echo
}
# sample_threads SECONDS NAME: threads_now ten times a second, to $OUT/NAME.threads.
sample_threads() {
  local end=$((SECONDS + $1))
  while [ "$SECONDS" -lt "$end" ]; do threads_now; sleep 0.1; done > "$OUT/$2.threads" &
}
# profile SECONDS NAME: a CPU profile of the daemon, in the background.
profile() { get "http://127.0.0.1:9737/debug/pprof/profile?seconds=$1" > "$OUT/$2.pprof" & PROF=$!; sleep 0.2; }

# mount_build BINARY FLAGS LOG: a fresh daemon (an empty block cache), warmed
# by 256 MiB of the first object.
mount_build() {
  # shellcheck disable=SC2086 # $2 is a list of flags
  "$BIN/$1" mount --endpoint $EP --bucket bench --metrics-addr 127.0.0.1:9737 $2 "$MP" > "$OUT/$3" 2>&1 &
  DAEMON=$!
  for _ in $(seq 100); do mountpoint -q "$MP" && break; sleep 0.1; done
  mountpoint -q "$MP" || { cat "$OUT/$3"; return 1; }
  dd if="$MP/prof-0000" of=/dev/null bs=1M count=256 status=none
}

while IFS='|' read -r label binary flags; do
  [ -z "$label" ] && continue
  echo "=== $label ($binary $flags)" | tee -a "$OUT/profile.txt"
  # One reader: every object after the first, one after another.
  mount_build "$binary" "$flags" "$label-single.log"
  c0=$(counters)
  profile "${SECONDS_SINGLE:-6}" "$label-single"
  sample_threads "${SECONDS_SINGLE:-6}" "$label-single"
  for i in $(seq 1 $((COUNT - 1))); do
    dd if="$MP/$(printf 'prof-%04d' "$i")" of=/dev/null bs=1M 2> "$OUT/dd.err"
    echo "  single $(printf 'prof-%04d' "$i"): $(rate "$OUT/dd.err")" | tee -a "$OUT/profile.txt"
  done
  wait "$PROF"
  echo "  counters before: $c0" >> "$OUT/profile.txt"
  echo "  counters after:  $(counters)" >> "$OUT/profile.txt"
  unmount_s3gdsfs >> "$OUT/profile.txt"
  # Four readers at once, objects in groups of four, by a fresh daemon.
  mount_build "$binary" "$flags" "$label-four.log"
  c0=$(counters)
  profile "${SECONDS_FOUR:-6}" "$label-four"
  sample_threads "${SECONDS_FOUR:-6}" "$label-four"
  for g in $(seq 0 4 $((COUNT - 4))); do
    pids=()
    for i in $(seq "$g" $((g + 3))); do
      dd if="$MP/$(printf 'prof-%04d' "$i")" of=/dev/null bs=1M 2> "$OUT/dd-$i.err" & pids+=($!)
    done
    wait "${pids[@]}"
    echo "  four prof-$(printf '%04d' "$g")..: $(for i in $(seq "$g" $((g + 3))); do rate "$OUT/dd-$i.err"; done | tr '\n' ' ')" | tee -a "$OUT/profile.txt"
  done
  wait "$PROF"
  echo "  counters before four: $c0" >> "$OUT/profile.txt"
  echo "  counters after four:  $(counters)" >> "$OUT/profile.txt"
  unmount_s3gdsfs >> "$OUT/profile.txt"
done <<< "$BUILDS"
rm -f "$OUT"/dd*.err
ls -la "$OUT"
