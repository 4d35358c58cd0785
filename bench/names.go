package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// The names benchmark (-names): many small objects under one prefix, read
// as a training loader given a file list reads them. Each filesystem is
// mounted afresh twice: once for a cold and a warm listing of the prefix,
// once for a cold and a warm epoch that opens every file by its name
// (no listing first), reads it whole and checks its sha256.

const (
	namesPrefix   = "small"
	namesReadyKey = "ready.bin" // outside the prefix: the mount is up once it shows this
	namesMinSize  = 1 << 10
	namesMaxSize  = 64 << 10
	namesSeed     = 25
)

type namesConfig struct {
	files   int
	workers int
}

// namesPhase is one timed step on one filesystem.
type namesPhase struct {
	Phase       string  `json:"phase"`
	Seconds     float64 `json:"seconds,omitempty"`
	Files       int     `json:"files,omitempty"`
	Bytes       int64   `json:"bytes,omitempty"`
	FilesPerSec float64 `json:"files_per_second,omitempty"`
	MBps        float64 `json:"mb_per_second,omitempty"`
	// S3Requests is what s3gdsfs's own counters say it sent during the
	// step, by operation; the peers have no such counters.
	S3Requests map[string]float64 `json:"s3_requests,omitempty"`
	Error      string             `json:"error,omitempty"`
}

type namesTarget struct {
	Name    string       `json:"name"`
	Version string       `json:"version,omitempty"`
	Status  string       `json:"status"`
	Reason  string       `json:"reason,omitempty"`
	Phases  []namesPhase `json:"phases,omitempty"`
}

type namesReport struct {
	Machine machineInfo `json:"machine"`
	Setup   struct {
		Server     string `json:"server"`
		PosixDir   string `json:"posix_dir"`
		Files      int    `json:"files"`
		Prefix     string `json:"prefix"`
		Bytes      int64  `json:"bytes"`
		MinSize    int    `json:"min_size"`
		MaxSize    int    `json:"max_size"`
		Workers    int    `json:"workers"`
		Order      string `json:"order"`
		PageCache  string `json:"page_cache"`
		ObjectList string `json:"object_list"`
	} `json:"setup"`
	Targets []namesTarget `json:"targets"`
}

func (r *namesReport) failed() bool {
	for _, t := range r.Targets {
		if t.Status == "failed" {
			return true
		}
	}
	return false
}

// namesObjects are the small objects: random sizes and contents, seeded.
func namesObjects(n int) []object {
	rng := rand.New(rand.NewSource(namesSeed))
	objs := make([]object, n)
	for i := range objs {
		objs[i] = object{
			Key:  fmt.Sprintf("%s/f%05d.bin", namesPrefix, i),
			Size: int64(namesMinSize + rng.Intn(namesMaxSize-namesMinSize+1)),
			Seed: namesSeed*1_000_000 + int64(i),
		}
	}
	return objs
}

func runNames(ctx context.Context, cfg config, ncfg namesConfig, cleanups *cleanupStack) (*namesReport, error) {
	objs := namesObjects(ncfg.files)
	ready := object{Key: namesReadyKey, Size: 1024, Seed: 7}
	var total int64
	for _, o := range objs {
		total += o.Size
	}
	r := &namesReport{Machine: describeMachine()}
	r.Setup.Files, r.Setup.Prefix, r.Setup.Bytes = len(objs), namesPrefix+"/", total
	r.Setup.MinSize, r.Setup.MaxSize, r.Setup.Workers = namesMinSize, namesMaxSize, ncfg.workers
	r.Setup.Order = fmt.Sprintf("every epoch opens the files in one seeded shuffled order (seed %d), %d workers taking the next name", namesSeed, ncfg.workers)

	logDir := filepath.Join(cfg.out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	srv, err := startServer(total, cleanups, &r.Setup.Server, &r.Setup.PosixDir)
	if err != nil {
		return nil, err
	}

	if err := srv.MakeBucket(ctx, bucketName); err != nil {
		return nil, err
	}
	progress("uploading %d objects under %s/ (%s) and %s", len(objs), namesPrefix, humanBytes(total), ready.Key)
	if err := uploadAll(ctx, srv, objs, ncfg.workers); err != nil {
		return nil, err
	}
	if _, err := srv.PutRandom(ctx, bucketName, ready.Key, ready.Size, ready.Seed); err != nil {
		return nil, err
	}
	listPath := filepath.Join(cfg.out, "names-objects.json")
	if js, err := json.MarshalIndent(objs, "", " "); err != nil {
		return nil, err
	} else if err := os.WriteFile(listPath, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	r.Setup.ObjectList = listPath + " (key, size, seed, sha256 of every object)"

	workdir, err := os.MkdirTemp("", "s3gdsfs-names-")
	if err != nil {
		return nil, err
	}
	cleanups.push(once(func() {
		if err := removeUnlessMounted(workdir); err != nil {
			progress("%v", err)
		}
	}))

	targets := []target{s3gdsfsTarget(cfg.bin, cfg.mountFlags, srv)}
	if cfg.skipPeers {
		r.Targets = append(r.Targets,
			namesTarget{Name: "rclone", Status: "skipped", Reason: "-skip-peers"},
			namesTarget{Name: "s3fs", Status: "skipped", Reason: "-skip-peers"})
	} else {
		targets = append(targets, rcloneTarget(srv, workdir), s3fsTarget(srv, workdir))
	}
	fuseOK, fuseReason := testenv.FUSEAvailable()
	caches := &cacheDropper{}
	order := rand.New(rand.NewSource(namesSeed)).Perm(len(objs))
	for _, t := range targets {
		if why := t.whyNotRun(ctx, fuseOK, fuseReason); why != "" {
			r.Targets = append(r.Targets, namesTarget{Name: t.name, Status: "skipped", Reason: why, Version: t.version})
			continue
		}
		nt := namesTarget{Name: t.name, Version: t.version, Status: "measured"}
		nt.Phases = namesOnTarget(ctx, cfg, t, objs, ready, order, ncfg.workers, workdir, cleanups, caches)
		for _, p := range nt.Phases {
			if p.Error != "" {
				nt.Status, nt.Reason = "failed", p.Phase+": "+p.Error
				break
			}
		}
		r.Targets = append(r.Targets, nt)
	}
	r.Setup.PageCache = caches.status()
	if caches.tried && caches.failed == nil {
		r.Setup.PageCache = "dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before each fresh mount, not between a cold step and its warm one"
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("interrupted")
	}
	return r, nil
}

// uploadAll stores the objects with workers concurrent PUTs, filling in
// their checksums.
func uploadAll(ctx context.Context, srv *testenv.Server, objs []object, workers int) error {
	var next atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(objs) {
					errs <- nil
					return
				}
				sum, err := srv.PutRandom(ctx, bucketName, objs[i].Key, objs[i].Size, objs[i].Seed)
				if err != nil {
					next.Store(int64(len(objs)))
					errs <- fmt.Errorf("upload %s: %w", objs[i].Key, err)
					return
				}
				objs[i].SHA256 = sum
			}
		}()
	}
	var first error
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// namesOnTarget runs the four steps on one filesystem, each pair on its
// own fresh mount. A failed step ends the target's run.
func namesOnTarget(ctx context.Context, cfg config, t target, objs []object, ready object, order []int, workers int, workdir string, cleanups *cleanupStack, caches *cacheDropper) []namesPhase {
	mountpoint := filepath.Join(workdir, "mnt-"+t.name)
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		return []namesPhase{{Phase: "mount", Error: err.Error()}}
	}
	var phases []namesPhase
	steps := [][]struct {
		name string
		do   func(ctx context.Context, m *mount) (namesPhase, error)
	}{
		{
			{"ls cold", func(ctx context.Context, m *mount) (namesPhase, error) { return listPrefix(m, objs) }},
			{"ls warm", func(ctx context.Context, m *mount) (namesPhase, error) { return listPrefix(m, objs) }},
		},
		{
			{"epoch cold", func(ctx context.Context, m *mount) (namesPhase, error) {
				return loaderEpoch(ctx, m, objs, order, workers)
			}},
			{"epoch warm", func(ctx context.Context, m *mount) (namesPhase, error) {
				return loaderEpoch(ctx, m, objs, order, workers)
			}},
		},
	}
	for _, group := range steps {
		caches.drop()
		progress("%s: mounting at %s", t.name, mountpoint)
		spec := t.spec(mountpoint)
		spec.name, spec.mountpoint = t.name, mountpoint
		spec.logPath = filepath.Join(cfg.out, "logs", "names-"+t.name+".log")
		m, err := startMount(ctx, spec, []object{ready})
		if err != nil {
			return append(phases, namesPhase{Phase: "mount", Error: err.Error()})
		}
		stop := once(m.unmount)
		cleanups.push(stop)
		for _, step := range group {
			progress("%s: %s", t.name, step.name)
			before, _ := namesCounters(t, m)
			p, err := timeLimited(ctx, cfg.runTimeout, m, step.do)
			p.Phase = step.name
			if after, ok := namesCounters(t, m); ok && before != nil {
				p.S3Requests = map[string]float64{}
				for op, v := range after {
					if d := v - before[op]; d > 0 {
						p.S3Requests[op] = d
					}
				}
			}
			if err != nil {
				p.Error = err.Error()
				progress("%s: %s FAILED: %v", t.name, step.name, err)
				phases = append(phases, p)
				progress("%s: unmounting", t.name)
				stop()
				return phases
			}
			progress("%s: %s: %.3f s, %.0f files/s", t.name, step.name, p.Seconds, p.FilesPerSec)
			phases = append(phases, p)
		}
		progress("%s: unmounting", t.name)
		stop()
	}
	return phases
}

// timeLimited runs one step, killing the daemon if it outlasts limit so
// that reads blocked in the mount return.
func timeLimited(ctx context.Context, limit time.Duration, m *mount, do func(context.Context, *mount) (namesPhase, error)) (namesPhase, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	type result struct {
		p   namesPhase
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := do(ctx, m)
		done <- result{p, err}
	}()
	select {
	case res := <-done:
		return res.p, res.err
	case <-ctx.Done():
		m.kill()
		<-done
		return namesPhase{}, fmt.Errorf("did not finish within %v (%v); daemon killed", limit, ctx.Err())
	}
}

// namesCounters sums s3gdsfs's S3 request counter by operation.
func namesCounters(t target, m *mount) (map[string]float64, bool) {
	if t.name != "s3gdsfs" {
		return nil, false
	}
	buf := make([]byte, 256<<10)
	n, err := syscall.Getxattr(m.spec.mountpoint, "user.s3gdsfs.stats", buf)
	if err != nil {
		return nil, false
	}
	var stats map[string]any
	if json.Unmarshal(buf[:n], &stats) != nil {
		return nil, false
	}
	byLabel, ok := stats["s3_requests_total"].(map[string]any)
	if !ok {
		return nil, false
	}
	out := map[string]float64{}
	for labels, v := range byLabel {
		op, _, _ := strings.Cut(labels, ",")
		if f, ok := v.(float64); ok {
			out[op] += f
		}
	}
	return out, true
}

// listPrefix reads the whole prefix directory (getdents, as a plain ls)
// and checks it names exactly the uploaded objects.
func listPrefix(m *mount, objs []object) (namesPhase, error) {
	dir := filepath.Join(m.root, namesPrefix)
	start := time.Now()
	entries, err := os.ReadDir(dir)
	secs := time.Since(start).Seconds()
	if err != nil {
		return namesPhase{}, err
	}
	p := namesPhase{Seconds: secs, Files: len(entries), FilesPerSec: float64(len(entries)) / secs}
	want := make(map[string]bool, len(objs))
	for _, o := range objs {
		want[path.Base(o.Key)] = true
	}
	var extra []string
	for _, e := range entries {
		if !want[e.Name()] {
			extra = append(extra, e.Name())
		}
		delete(want, e.Name())
	}
	if len(want) > 0 || len(extra) > 0 {
		var missing []string
		for k := range want {
			missing = append(missing, k)
		}
		sort.Strings(missing)
		return p, fmt.Errorf("listing of %s: %d entries, %d names missing (first %v), %d unexpected (first %v)",
			dir, len(entries), len(missing), first(missing, 3), len(extra), first(extra, 3))
	}
	return p, nil
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// loaderEpoch opens every object by its path, with workers goroutines
// taking the next name of order, reads it whole and checks its length and
// sha256. The first mismatch or error fails the epoch.
func loaderEpoch(ctx context.Context, m *mount, objs []object, order []int, workers int) (namesPhase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		bytesRd  atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(order) {
					return
				}
				o := objs[order[i]]
				f, err := os.Open(m.path(o))
				if err == nil {
					err = hashAll(o, f)
					f.Close()
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				bytesRd.Add(o.Size)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	p := namesPhase{Seconds: secs, Files: len(order), Bytes: bytesRd.Load()}
	p.FilesPerSec = float64(p.Files) / secs
	p.MBps = float64(p.Bytes) / secs / 1e6
	return p, firstErr
}

func (r *namesReport) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "names.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	table := r.table()
	os.Stdout.WriteString(table)
	if err := os.WriteFile(filepath.Join(dir, "names.txt"), []byte(table), 0o644); err != nil {
		return err
	}
	progress("wrote %s and %s", filepath.Join(dir, "names.json"), filepath.Join(dir, "names.txt"))
	return nil
}

var namesPhaseOrder = []string{"ls cold", "ls warm", "epoch cold", "epoch warm"}

func (r *namesReport) table() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "names and small files: %d objects under %s (%s, %d-%d KiB each), %s\n",
		r.Setup.Files, r.Setup.Prefix, humanBytes(r.Setup.Bytes), r.Setup.MinSize>>10, r.Setup.MaxSize>>10, r.Setup.Server)
	fmt.Fprintf(&b, "machine: %d cores, %s, %d GiB; every filesystem shares them with the server\n",
		r.Machine.Cores, r.Machine.CPU, r.Machine.MemoryGiB)
	fmt.Fprintf(&b, "ls: one readdir of the whole prefix on a fresh mount, then again; epoch: on another fresh mount, %d workers open each file by name, read it whole, check its sha256, then again\n\n", r.Setup.Workers)
	fmt.Fprintf(&b, "%-8s %10s %10s %22s %22s\n", "target", "ls cold", "ls warm", "epoch cold", "epoch warm")
	for _, t := range r.Targets {
		if t.Status == "skipped" {
			fmt.Fprintf(&b, "%-8s skipped: %s\n", t.Name, t.Reason)
			continue
		}
		byName := map[string]namesPhase{}
		for _, p := range t.Phases {
			byName[p.Phase] = p
		}
		cells := []string{}
		for i, name := range namesPhaseOrder {
			p, ok := byName[name]
			switch {
			case !ok || p.Error != "":
				cells = append(cells, "-")
			case i < 2:
				cells = append(cells, fmt.Sprintf("%.3f s", p.Seconds))
			default:
				cells = append(cells, fmt.Sprintf("%.2f s %5.0f f/s", p.Seconds, p.FilesPerSec))
			}
		}
		fmt.Fprintf(&b, "%-8s %10s %10s %22s %22s\n", t.Name, cells[0], cells[1], cells[2], cells[3])
		if t.Status == "failed" {
			fmt.Fprintf(&b, "         FAILED: %s\n", oneLine(t.Reason))
		}
	}
	for _, t := range r.Targets {
		var parts []string
		for _, p := range t.Phases {
			if p.S3Requests == nil {
				continue
			}
			ops := make([]string, 0, len(p.S3Requests))
			for op := range p.S3Requests {
				ops = append(ops, op)
			}
			sort.Strings(ops)
			var s []string
			for _, op := range ops {
				s = append(s, fmt.Sprintf("%s %.0f", op, p.S3Requests[op]))
			}
			if len(s) == 0 {
				s = []string{"none"}
			}
			parts = append(parts, fmt.Sprintf("  %-10s %s", p.Phase, strings.Join(s, ", ")))
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "\n%s S3 requests per step (its own counters):\n%s\n", t.Name, strings.Join(parts, "\n"))
		}
	}
	if !r.failed() {
		fmt.Fprintf(&b, "\nevery listing named exactly the %d objects; every epoch read every file whole, its sha256 matching the upload\n", r.Setup.Files)
	}
	return b.String()
}
