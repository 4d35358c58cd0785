package vfs

import (
	"context"
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"golang.org/x/sys/unix"
)

// PageSink writes bytes of an open file into the kernel's page cache, where
// its reader finds them without asking the daemon (the fs adapter does it
// with FUSE_NOTIFY_STORE). A reply to a read request is copied by one
// thread, one page at a time, while the reader waits; bytes pushed ahead
// are copied by several threads while the reader copies earlier ones out
// of the page cache, so one reader reads at page-cache speed.
type PageSink interface {
	// Store writes p at off. An error (the kernel forgot the file, the
	// mount went away) ends pushing for the handle.
	Store(off int64, p []byte) error
}

// pushPerHandle is how many blocks of one handle are written at once: one
// writer copied 1.9 GB/s on the 16-core machine, four 6.4-8.0, eight 5.2
// (docs/results/push-experiment-h200.txt).
const pushPerHandle = 4

// DefaultPushWorkers is the default of Config.PushWorkers: pushes are CPU
// work (a page allocated and copied per 4 KiB), so half the CPUs at most.
func DefaultPushWorkers() int { return max(runtime.NumCPU()/2, 1) }

// pageSize is the size of one tripwire: the first page of every part is
// left out of the push, so that a reader that reaches it asks the daemon
// for it, and the daemon learns where the reader is and prefetches on.
var pageSize = int64(os.Getpagesize())

// pusher writes the blocks a handle's prefetcher fetched ahead of its reader
// into the page cache, in order, a few at a time. It never downloads: a
// block that is neither cached nor on its way (evicted, or not fetched for
// lack of memory) is left for the reader to ask for.
type pusher struct {
	h    *Handle
	sink PageSink
	ctx  context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	next, to int64 // blocks queued to push: [next, to)
	workers  int
	closed   bool
	// pushed are blocks whose bytes (but a tripwire) are in the page cache:
	// a reader that stops inside one will not ask for the rest, so the
	// block need not be kept for it. Blocks behind the reader are dropped.
	pushed map[int64]bool
}

// PushTo makes the handle write blocks it fetches ahead of a sequential
// reader into sink. Call it once, before the first read. A pushing handle
// fetches with parallel ranged GETs, never a whole-object stream: one
// stream is read by one goroutine at about the rate of a direct-I/O reader
// (2.6-2.9 GB/s against 3.9 with ranges on the 16-core machine), so the
// pushes never got ahead of the reader.
func (h *Handle) PushTo(sink PageSink) {
	ctx, stop := context.WithCancel(context.Background())
	h.push = &pusher{h: h, sink: sink, ctx: ctx, stop: stop, pushed: make(map[int64]bool)}
	h.streamTried = true
}

// StopPush ends pushing for a handle that PushTo set up (at close, or when
// its file is read into GPU memory instead); reads go on through requests.
// Blocks being written finish.
func (h *Handle) StopPush() {
	if h.push != nil {
		h.push.close()
	}
}

// add queues blocks [from, to). A gap from what is queued drops the rest of
// the old run: the reader went elsewhere.
func (p *pusher) add(from, to int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || to <= from {
		return
	}
	if from > p.to || p.next >= p.to {
		p.next = from // a new run (blocks pushed already are skipped)
	}
	p.to = max(p.to, to)
	for p.workers < pushPerHandle && p.next+int64(p.workers) < p.to {
		p.workers++
		go p.run()
	}
}

// drop forgets what is queued (a random read) and the pushed marks behind
// off (the reader is past them).
func (p *pusher) drop(all bool, off int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if all {
		p.next = p.to
	}
	bs := int64(p.h.f.cfg.BlockSize)
	for idx := range p.pushed {
		if (idx+1)*bs <= off {
			delete(p.pushed, idx)
		}
	}
}

func (p *pusher) isPushed(idx int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pushed[idx]
}

// close stops pushing; blocks being written finish.
func (p *pusher) close() {
	p.mu.Lock()
	p.closed = true
	p.next = p.to
	p.mu.Unlock()
	p.stop()
}

func (p *pusher) run() {
	for {
		p.mu.Lock()
		if p.closed || p.next >= p.to {
			p.workers--
			p.mu.Unlock()
			return
		}
		idx := p.next
		p.next++
		p.mu.Unlock()
		if err := p.pushBlock(idx); err != nil {
			p.fail(err)
		}
	}
}

func (p *pusher) fail(err error) {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	p.next = p.to
	p.mu.Unlock()
	if !first {
		return
	}
	reason := "other"
	var en syscall.Errno
	if errors.As(err, &en) && unix.ErrnoName(en) != "" {
		reason = unix.ErrnoName(en)
	}
	p.h.f.log.Debug("page cache push stopped", "bucket", p.h.obj.bucket, "key", p.h.obj.key, "err", err)
	p.h.f.m.PushFailures.WithLabelValues(reason).Inc()
}

// pushBlock writes block idx, unless the reader is already past it.
func (p *pusher) pushBlock(idx int64) error {
	f := p.h.f
	bs := int64(f.cfg.BlockSize)
	off := idx * bs
	if p.isPushed(idx) || p.h.readerPassed(off+bs) {
		return nil
	}
	blk, err := f.fetch.await(p.ctx, p.h.obj, idx)
	if blk == nil || err != nil {
		return nil // the reader asks for it; a failed download is its error to see
	}
	defer blk.Release()
	// A slot only for the copy: waiting for a download must not hold up
	// other files' pushes.
	select {
	case f.pushSlots <- struct{}{}:
		defer func() { <-f.pushSlots }()
	case <-p.ctx.Done():
		return nil
	}
	if p.h.readerPassed(off + int64(len(blk.Data))) {
		return nil
	}
	skip := int64(0)
	if off%f.cfg.PartSize == 0 {
		skip = min(pageSize, int64(len(blk.Data)))
	}
	if skip < int64(len(blk.Data)) {
		if err := p.sink.Store(off+skip, blk.Data[skip:]); err != nil {
			return err
		}
		f.m.PushBytes.Add(float64(int64(len(blk.Data)) - skip))
	}
	p.mu.Lock()
	p.pushed[idx] = true
	p.mu.Unlock()
	key := cache.BlockKey{Object: p.h.obj.id, Index: idx}
	if skip > 0 {
		// The reader will ask for the tripwire: keep its block for it.
		f.blocks.PutAhead(key, blk)
	} else if others := f.otherReaders(p.h); len(others) == 0 || !p.h.keepIfWanted(others, idx, blk) {
		// The page cache holds it now (another reader of this version
		// through the page cache reads the same pages; one with direct
		// I/O close behind has it kept): give its memory back rather
		// than push other files' blocks out of the cache.
		f.blocks.Drop(key, blk)
	}
	return nil
}

// readerPassed reports whether the reader has read up to end already.
func (h *Handle) readerPassed(end int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nextOff >= end
}
