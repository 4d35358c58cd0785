"""GPU-read variants side by side: alternating rounds against raw GETs, with CPU accounting.

Every variant is a daemon mounted at its own mountpoint, all up at once (scripts/gpu/gpu_ab.sh
mounts them); one set of worker processes per process count (THREADS threads, one device buffer
per thread) runs a trial against each mount and raw s3load in turn, the order rotated each round.
CPU seconds are each process's own (/proc/PID/stat). Each mount serves one untimed trial first, so
that the timed ones find it warm. Prints one JSON line per trial and a summary, and writes all
trials as JSON.
"""
import argparse, hashlib, json, multiprocessing as mp, os, resource, subprocess, sys, threading, time, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
import s3gds  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")

def worker(idx, threads, objs, cmd_q, res_q):
    import torch
    torch.cuda.set_device(0)
    size = max(o["size"] for o in objs)
    bufs = [torch.empty(size, dtype=torch.uint8, device="cuda:0") for _ in range(threads)]
    torch.cuda.synchronize()
    fds = {}
    res_q.put(("ready", idx, None))
    while True:
        cmd = cmd_q.get()
        if cmd is None:
            return
        mount, seconds, start_at, step = cmd
        for o in objs:
            if (mount, o["key"]) not in fds:
                fds[(mount, o["key"])] = os.open(os.path.join(mount, o["key"]), os.O_RDONLY)
        counts = [0] * threads; nbytes = [0] * threads; last = [None] * threads; errors = []
        while time.time() < start_at:
            time.sleep(0.001)
        stop = start_at + seconds
        def run(t):
            k = idx * threads + t
            try:
                while time.time() < stop:
                    o = objs[k % len(objs)]; k += step
                    r = s3gds.read_into(bufs[t], None, fd=fds[(mount, o["key"])], length=o["size"])
                    nbytes[t] += r.nbytes; counts[t] += 1; last[t] = o
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
        t0 = time.time()
        ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        [t.start() for t in ts]; [t.join() for t in ts]
        elapsed = time.time() - t0
        bad = 0
        for t in range(threads):
            if last[t] is not None:
                got = hashlib.sha256(bufs[t][: last[t]["size"]].cpu().numpy().tobytes()).hexdigest()
                bad += got != last[t]["sha256"]
        res_q.put(("done", idx, {"bytes": sum(nbytes), "reads": sum(counts), "seconds": elapsed, "errors": errors, "bad": bad}))

def cpu_total():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f))
    idle = v[3] + v[4]
    return sum(v), idle, v  # user nice system idle iowait irq softirq steal

def pid_cpu(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except OSError:
        return 0.0

def prof(url, path, secs):
    try:
        data = urllib.request.urlopen(url + f"/debug/pprof/profile?seconds={secs}", timeout=secs + 30).read()
        open(path, "wb").write(data)
    except Exception as e:  # noqa: BLE001
        print("pprof failed", url, e, file=sys.stderr)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", default=[], help="name=mount=pid=metricsurl")
    ap.add_argument("--raw", action="append", default=[], help="name=s3load args")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--procs", default="1,8")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vgw-pid", type=int, required=True)
    ap.add_argument("--s3load", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile-dir")
    ap.add_argument("--distinct", action="store_true",
                    help="each thread steps by the number of threads, so no two read one object at once (needs as many objects as threads)")
    a = ap.parse_args()
    objs = json.load(open(a.manifest))["objects"]
    variants = [dict(zip(("name", "mount", "pid", "url"), v.split("=", 3)), kind="gpu") for v in a.variant]
    raws = [dict(name=r.split("=", 1)[0], args=r.split("=", 1)[1].split(), kind="raw") for r in a.raw]
    keys = ",".join(o["key"] for o in objs)
    results = []
    ctx = mp.get_context("spawn")
    for n in [int(x) for x in a.procs.split(",")]:
        res_q = ctx.Queue(); cmd_qs = [ctx.Queue() for _ in range(n)]
        ps = [ctx.Process(target=worker, args=(i, a.threads, objs, cmd_qs[i], res_q)) for i in range(n)]
        [p.start() for p in ps]
        ready = 0
        while ready < n:
            kind, _, _ = res_q.get(timeout=300); ready += kind == "ready"
        items = raws + variants
        # One untimed trial of each mount first: a daemon's first reads import the workers'
        # buffers and open its connections, as a daemon in service has long done.
        for it in variants:
            start_at = time.time() + 0.3
            for q in cmd_qs:
                q.put((it["mount"], 1.0, start_at, n * a.threads if a.distinct else 1))
            for _ in range(n):
                res_q.get(timeout=300)
        for rnd in range(a.rounds):
            order = items[rnd % len(items):] + items[: rnd % len(items)]
            for it in order:
                t0, i0, v0 = cpu_total()
                vgw0 = pid_cpu(a.vgw_pid)
                dpid = int(it.get("pid", 0) or 0)
                d0 = pid_cpu(dpid) if dpid else 0
                w0 = sum(pid_cpu(p.pid) for p in ps)
                ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                rec = {"procs": n, "round": rnd, "name": it["name"]}
                pt = None
                if it["kind"] == "raw":
                    st = time.time()
                    out = subprocess.run([a.s3load, "get", *it["args"], "--keys", keys, "--workers", str(n * a.threads),
                                          "--seconds", str(a.seconds)], capture_output=True, text=True)
                    wall = time.time() - st
                    if out.returncode:
                        rec["error"] = out.stderr[-2000:]
                    else:
                        d = json.loads(out.stdout); rec["gbps"] = d["gbps"]; rec["ops_per_s"] = d.get("ops_per_s")
                    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    rec["client_cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
                else:
                    if a.profile_dir and rnd == 0:
                        pt = threading.Thread(target=prof, args=(it["url"], os.path.join(a.profile_dir, f"prof-{it['name']}-{n}.pb.gz"), int(a.seconds) - 1))
                    start_at = time.time() + 0.3
                    if pt: pt.start()
                    for q in cmd_qs:
                        q.put((it["mount"], a.seconds, start_at, n * a.threads if a.distinct else 1))
                    # The host's busy cores over the timed window only: the workers check
                    # their buffers afterwards, on few cores.
                    time.sleep(max(start_at - time.time(), 0))
                    t0, i0, v0 = cpu_total()
                    time.sleep(max(start_at + a.seconds - time.time(), 0))
                    window = cpu_total()
                    rs = []
                    while len(rs) < n:
                        kind, _, val = res_q.get(timeout=a.seconds + 300); rs.append(val)
                    wall = max(r["seconds"] for r in rs)
                    tot = sum(r["bytes"] for r in rs)
                    rec.update(gbps=tot / wall / 1e9, ops_per_s=sum(r["reads"] for r in rs) / wall,
                               errors=[e for r in rs for e in r["errors"]][:5], bad=sum(r["bad"] for r in rs))
                    rec["client_cpu_s"] = sum(pid_cpu(p.pid) for p in ps) - w0
                    if pt: pt.join()
                t1, i1, v1 = cpu_total() if it["kind"] == "raw" else window
                rec["host_busy_cores"] = ((t1 - t0) - (i1 - i0)) / max(t1 - t0, 1) * os.cpu_count()
                rec["host_sys_frac"] = (v1[2] - v0[2] + v1[5] - v0[5] + v1[6] - v0[6]) / max((t1 - t0) - (i1 - i0), 1)
                rec["vgw_cpu_s"] = pid_cpu(a.vgw_pid) - vgw0
                rec["daemon_cpu_s"] = (pid_cpu(dpid) - d0) if dpid else 0
                rec["wall"] = wall
                results.append(rec)
                print(json.dumps(rec), flush=True)
        for q in cmd_qs:
            q.put(None)
        [p.join(timeout=60) for p in ps]
    json.dump(results, open(a.out, "w"), indent=1)
    # summary: mean gbps by (procs, name), and ratio to the first raw
    from collections import defaultdict
    agg = defaultdict(list)
    for r in results:
        if "gbps" in r: agg[(r["procs"], r["name"])].append(r)
    for (n, name), rs in sorted(agg.items()):
        g = sum(r["gbps"] for r in rs) / len(rs)
        ref = agg.get((n, raws[0]["name"])) if raws else None
        rg = sum(r["gbps"] for r in ref) / len(ref) if ref else 0
        cores = sum(r["host_busy_cores"] for r in rs) / len(rs)
        dc = sum(r["daemon_cpu_s"] for r in rs) / max(sum(r["gbps"] * r["wall"] for r in rs), 1e-9)
        vc = sum(r["vgw_cpu_s"] for r in rs) / max(sum(r["gbps"] * r["wall"] for r in rs), 1e-9)
        cc = sum(r["client_cpu_s"] for r in rs) / max(sum(r["gbps"] * r["wall"] for r in rs), 1e-9)
        # the ratio within each round, against the raw trial of that round: the machine drifts
        # between rounds more than variants differ
        by_round = {r["round"]: r["gbps"] for r in (ref or [])}
        paired = [r["gbps"] / by_round[r["round"]] for r in rs if by_round.get(r["round"])]
        pr = f"x{sum(paired) / len(paired):.3f} [{min(paired):.2f}-{max(paired):.2f}]" if paired else "-"
        ops = sum(r.get("ops_per_s") or 0 for r in rs) / len(rs)
        print(f"N={n} {name:14s} {g:6.2f} GB/s {ops:7.1f} ops/s  x{g / rg if rg else 0:.3f} raw  by round {pr}  [{' '.join('%.2f' % r['gbps'] for r in rs)}]  busy {cores:4.1f} cores  cpu-s/GB daemon {dc:.3f} vgw {vc:.3f} client {cc:.3f}", flush=True)

if __name__ == "__main__":
    main()
