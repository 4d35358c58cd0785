package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// mountTrials mounts one filesystem for a single reader of the large file
// and four concurrent readers of the medium files, all with 1 MiB read
// calls; done then checks every file's sha256 untimed and unmounts. A mount
// that fails gives trials whose measurements hold the error.
func mountTrials(ctx context.Context, cfg config, t target, sets objectSets, workdir string, cleanups *cleanupStack, caches *cacheDropper, serverPid int) (trials []*trial, done func(ctx context.Context)) {
	set := sets.forRun(0) // sizes and names; every copy has the same shape
	single := &measurement{Target: t.name, Test: "single", Bytes: set.Large.Size,
		Description: "1 reader, 1 MiB reads of " + set.Large.Key}
	four := &measurement{Target: t.name, Test: "four", Bytes: set.mediumBytes(),
		Description: "4 concurrent readers, one medium file each, 1 MiB reads"}
	preads := &measurement{Target: t.name, Test: "preads", Bytes: set.Large.Size,
		Description: fmt.Sprintf("%d threads of %d MiB preads of %s on one descriptor", preadThreads, preadChunk>>20, set.Large.Key)}
	all := []*measurement{single, four, preads}
	fail := func(err error) ([]*trial, func(context.Context)) {
		for _, m := range all {
			if m.Error == "" {
				m.Error = err.Error()
			}
		}
		return []*trial{newTrial(cfg, single, hooks{}, nil), newTrial(cfg, four, hooks{}, nil), newTrial(cfg, preads, hooks{}, nil)}, func(context.Context) {}
	}

	mountpoint := filepath.Join(workdir, "mnt-"+t.name)
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		return fail(err)
	}
	var (
		current     *mount
		stopCurrent func()
	)
	mountNow := func(ctx context.Context) error {
		progress("%s: mounting at %s", t.name, mountpoint)
		spec := t.spec(mountpoint)
		spec.name, spec.mountpoint = t.name, mountpoint
		spec.logPath = filepath.Join(cfg.out, "logs", t.name+".log")
		m, err := startMount(ctx, spec, set.all())
		if err != nil {
			return err
		}
		current, stopCurrent = m, once(m.unmount)
		cleanups.push(stopCurrent)
		return nil
	}
	unmountNow := func() {
		if current != nil {
			progress("%s: unmounting", t.name)
			stopCurrent()
			current = nil
		}
	}
	if err := mountNow(ctx); err != nil {
		return fail(err)
	}

	h := hooks{
		beforeRun: func(ctx context.Context) error {
			if cfg.remount {
				unmountNow()
				if err := mountNow(ctx); err != nil {
					return err
				}
			}
			if !current.alive() {
				return fmt.Errorf("%s is no longer mounted", t.name)
			}
			caches.drop()
			return nil
		},
		pids: func() map[string]int {
			p := map[string]int{"server": serverPid}
			if current != nil {
				p["fs"] = current.cmd.Process.Pid
			}
			return p
		},
		onTimeout: func() {
			if m := current; m != nil {
				m.kill()
			}
		},
	}
	if t.name == "s3gdsfs" {
		h.counters = func() (map[string]float64, error) {
			if current == nil {
				return nil, fmt.Errorf("not mounted")
			}
			return s3gdsfsCounters(current.spec.mountpoint)
		}
	}
	readFile := func(ctx context.Context, o object) (int64, error) {
		if current == nil {
			return 0, fmt.Errorf("not mounted")
		}
		f, err := os.Open(current.path(o))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return drain(ctx, o, 0, f)
	}

	trials = []*trial{
		newTrial(cfg, single, h, func(ctx context.Context, run int) (int64, error) {
			return readFile(ctx, sets.forRun(run).Large)
		}),
		newTrial(cfg, four, h, func(ctx context.Context, run int) (int64, error) {
			var jobs []func(context.Context) (int64, error)
			for _, o := range sets.forRun(run).Medium {
				jobs = append(jobs, func(ctx context.Context) (int64, error) { return readFile(ctx, o) })
			}
			return parallel(ctx, len(jobs), eachTimed(four, jobs))
		}),
		newTrial(cfg, preads, h, func(ctx context.Context, run int) (int64, error) {
			if current == nil {
				return 0, fmt.Errorf("not mounted")
			}
			large := sets.forRun(run).Large
			f, err := os.Open(current.path(large))
			if err != nil {
				return 0, err
			}
			defer f.Close()
			return parallel(ctx, preadThreads, preadJobs(large, f))
		}),
	}
	done = func(ctx context.Context) {
		defer unmountNow()
		if ctx.Err() != nil {
			return
		}
		progress("%s: verifying sha256 of every file", t.name)
		markVerified(all, verifyFiles(current, sets))
	}
	return trials, done
}

func verifyFiles(m *mount, sets objectSets) error {
	if m == nil {
		return fmt.Errorf("not mounted")
	}
	for _, o := range sets.all() {
		f, err := os.Open(m.path(o))
		if err != nil {
			return err
		}
		err = hashAll(o, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
