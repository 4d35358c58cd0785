package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// benchMount mounts one filesystem and measures a single reader of the
// large file and four concurrent readers of the medium files, all with
// 1 MiB read calls, then checks every file's sha256 untimed.
func benchMount(ctx context.Context, cfg config, t target, sets objectSets, workdir string, cleanups *cleanupStack, caches *cacheDropper, serverPid int) []*measurement {
	set := sets.forRun(0) // sizes and names; every copy has the same shape
	single := &measurement{Target: t.name, Test: "single", Bytes: set.Large.Size,
		Description: "1 reader, 1 MiB reads of " + set.Large.Key}
	four := &measurement{Target: t.name, Test: "four", Bytes: set.mediumBytes(),
		Description: "4 concurrent readers, one medium file each, 1 MiB reads"}
	all := []*measurement{single, four}
	fail := func(err error) []*measurement {
		for _, m := range all {
			if m.Error == "" {
				m.Error = err.Error()
			}
		}
		return all
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
		m, err := startMount(ctx, spec, set)
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
	defer unmountNow()
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

	measure(ctx, cfg, single, h, func(ctx context.Context, run int) (int64, error) {
		return readFile(ctx, sets.forRun(run).Large)
	})
	measure(ctx, cfg, four, h, func(ctx context.Context, run int) (int64, error) {
		var jobs []func(context.Context) (int64, error)
		for _, o := range sets.forRun(run).Medium {
			jobs = append(jobs, func(ctx context.Context) (int64, error) { return readFile(ctx, o) })
		}
		return parallel(ctx, len(jobs), eachTimed(four, jobs))
	})

	if ctx.Err() != nil {
		return all
	}
	progress("%s: verifying sha256 of every file", t.name)
	markVerified(all, verifyFiles(current, sets))
	return all
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
