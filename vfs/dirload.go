package vfs

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// A loader that opens many names of a directory it never listed would send
// a HEAD and a one-key LIST per name. When the lookups of a directory keep
// missing (the loadAfter-th miss within loadWindow, or a miss while another
// lookup of it is in flight), the directory is listed whole once in the
// background, and the lookups that come while it runs wait for it as long
// as it is short; once it is cached (listings.go) they answer from it.
const (
	loadAfter  = 4
	loadWindow = 2 * time.Second
	// loadWaitPages: lookups wait for a listing only while it has sent
	// fewer LISTs than this (a directory of up to some 3,000 names);
	// past that they ask the store themselves while it runs on.
	loadWaitPages = 3
	// loadWaitMax bounds a lookup's wait for a listing.
	loadWaitMax = time.Second
	// loadTimeout bounds one background listing.
	loadTimeout = 5 * time.Minute
	// maxLoadDirs bounds the directories whose lookups are counted.
	maxLoadDirs = 4096
)

// dirLoads counts the lookup misses of directories and runs their
// background listings, at most one per directory at a time.
type dirLoads struct {
	mu  sync.Mutex
	now func() time.Time
	lru *simplelru.LRU[string, *dirLoad] // by the directory's Path
}

type dirLoad struct {
	misses   int
	first    time.Time // of the window the misses count in
	inFlight int       // lookups asking the store
	run      *dirLoadRun
	// notBefore: not listed again before it (a listing over the bound is
	// remembered for --meta-ttl, a failed one for the window).
	notBefore time.Time
}

// dirLoadRun is one background listing.
type dirLoadRun struct {
	done chan struct{} // closed when it ended, cached or not
	slow chan struct{} // closed when lookups should stop waiting
}

func newDirLoads() *dirLoads {
	l := &dirLoads{now: time.Now}
	l.lru, _ = simplelru.NewLRU[string, *dirLoad](maxLoadDirs, nil)
	return l
}

// missed notes a lookup of dir that neither cache answered. It returns the
// listing to wait for, if one runs and is worth waiting for, and the
// directory's state, to pass to asked and then to done once the lookup asks
// the store itself.
func (f *FS) missed(dir Entry) (*dirLoadRun, *dirLoad) {
	if f.listed.lru == nil || f.isTop(dir) {
		return nil, nil
	}
	l := f.loads
	path := dir.Path()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	d, ok := l.lru.Get(path)
	if !ok {
		d = &dirLoad{first: now}
		l.lru.Add(path, d)
	}
	if now.Sub(d.first) > loadWindow {
		d.misses, d.first = 0, now
	}
	d.misses++
	if d.run == nil && !now.Before(d.notBefore) && (d.misses >= loadAfter || d.inFlight > 0) {
		d.run = &dirLoadRun{done: make(chan struct{}), slow: make(chan struct{})}
		d.misses = 0
		go f.load(dir, d, d.run)
	}
	return d.run, d
}

// wait waits for run to end, while it is short; it reports whether it ended.
func (run *dirLoadRun) wait(ctx context.Context) bool {
	t := time.NewTimer(loadWaitMax)
	defer t.Stop()
	select {
	case <-run.done:
		return true
	case <-run.slow:
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// asking and asked bracket a lookup's own requests for dir.
func (f *FS) asking(d *dirLoad) {
	if d != nil {
		f.loads.mu.Lock()
		d.inFlight++
		f.loads.mu.Unlock()
	}
}

func (f *FS) asked(d *dirLoad) {
	if d != nil {
		f.loads.mu.Lock()
		d.inFlight--
		f.loads.mu.Unlock()
	}
}

// load lists dir whole into the listings cache, stopping at the cache's
// bound: a directory over it is not listed again for --meta-ttl.
func (f *FS) load(dir Entry, d *dirLoad, run *dirLoadRun) {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	r := &DirReader{f: f, dir: dir, seen: make(map[string]struct{})}
	var retry time.Duration
	slow := false
	for {
		out, err := r.Next(ctx)
		if err != nil {
			retry = loadWindow
			break
		}
		if r.over {
			retry = f.cfg.MetaTTL
			f.log.Debug("directory over the listings bound; its names are looked up one by one", "bucket", dir.Bucket, "prefix", dir.Key)
			break
		}
		if len(out) == 0 && r.done && len(r.held) == 0 {
			break // complete and cached
		}
		if !slow && r.pages >= loadWaitPages {
			slow = true
			close(run.slow)
		}
	}
	f.loads.mu.Lock()
	d.run = nil
	if retry > 0 {
		d.notBefore = f.loads.now().Add(retry)
	}
	f.loads.mu.Unlock()
	close(run.done)
}
