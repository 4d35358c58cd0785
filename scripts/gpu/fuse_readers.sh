# Shared by the scripts that read a FUSE file server without S3
# (loop_experiment.sh, poll_ab.sh; sourced). Needs: OUT, MNT, qos_on and
# qos_off (may do nothing). Provides: readers, serve.

# readers N FILE: N processes read FILE at once in 1 MiB preadv calls, twice;
# each prints its rate and CPU, then one md5 of the file.
readers() {
  python3 - "$1" "$2" <<'PY'
import hashlib, mmap, os, resource, sys, time
from multiprocessing import Process, Queue
n, path = int(sys.argv[1]), sys.argv[2]
def one(q):
    fd = os.open(path, os.O_RDONLY); buf = mmap.mmap(-1, 1 << 20); got = 0
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
    while k := os.preadv(fd, [buf], got):
        got += k
    t = time.perf_counter() - t0; r1 = resource.getrusage(resource.RUSAGE_SELF)
    q.put((got / t / 1e9, ((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)) / (got / 1e9), t0, t0 + t, got))
for rnd in range(2):
    q = Queue(); ps = [Process(target=one, args=(q,)) for _ in range(n)]
    [p.start() for p in ps]; rs = [q.get() for _ in ps]; [p.join() for p in ps]
    agg = sum(r[4] for r in rs) / (max(r[3] for r in rs) - min(r[2] for r in rs)) / 1e9
    print(f"  {n} reader(s): together {agg:.3f} GB/s; each " + ", ".join(f"{r[0]:.3f}" for r in rs) + " GB/s; reader CPU " + ", ".join(f"{r[1]:.2f}" for r in rs) + " s/GB")
h = hashlib.md5(); fd = os.open(path, os.O_RDONLY)
while b := os.read(fd, 1 << 22):
    h.update(b)
print(f"  md5 {h.hexdigest()}")
PY
}

# serve LABEL QOS(0|1) ENV... -- CMD...: mount, read with 1 and 4 readers, unmount.
serve() {
  local label=$1 qos=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  echo "== $label$([ "$qos" = 1 ] && echo ', idle states held off')"
  env "${envs[@]}" "$@" "$MNT" > "$OUT/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 200); do [ -e "$MNT/f" ] && break; sleep 0.05; done
  [ "$qos" = 1 ] && qos_on
  readers 1 "$MNT/f"; readers 4 "$MNT/f"
  qos_off
  kill -INT "$pid"; wait "$pid" || true
  umount -l "$MNT" 2>/dev/null || true
  grep -E "^(md5|loopexp: [0-9])" "$OUT/server.log" | sed 's/^/  server: /'
}
