package vfs

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Handle is one open file: a pinned object version and a prefetcher that
// follows the reader.
type Handle struct {
	f   *FS
	obj object

	mu sync.Mutex
	// nextOff is where a sequential reader reads next.
	nextOff int64
	// window is how far ahead of the reader the next prefetch reaches; it
	// starts at InitialWindow and doubles with every sequential read.
	window int64
	// prefetchedTo is the end of what has been asked for so far.
	prefetchedTo int64
	// streak is set while the reader is sequential.
	streak bool
	// stream feeds the reader from one GET while it reads on from the start
	// of the object (stream.go); nil once ranged GETs serve it.
	stream *stream
	// streamTried: a handle sends at most one whole-object GET.
	streamTried bool
	// reading: the handle has served a read (it counts in FS.readingHandles).
	reading bool
	// splice feeds a direct-I/O reader from a GET's socket (splice.go);
	// spliceOK: the open allows it; spliceTried: at most one per handle.
	splice      *spliceFeed
	spliceOK    bool
	spliceTried bool
}

// Open pins the entry's version: every byte read through the handle comes
// from that version or the read fails.
func (f *FS) Open(e Entry) (*Handle, error) {
	if e.Dir {
		return nil, fmt.Errorf("%s: is a directory", e.Path())
	}
	f.m.OpenHandles.Inc()
	h := &Handle{f: f, obj: newObject(e), window: f.cfg.InitialWindow}
	f.readersMu.Lock()
	f.readers[h.obj.id] = append(f.readers[h.obj.id], h)
	f.readersMu.Unlock()
	return h, nil
}

// Version is the version the handle reads.
func (h *Handle) Version() objstore.Version { return h.obj.version }

// Close releases the handle. A stream it had ends once the blocks it
// claimed are in (other readers may be waiting for them).
func (h *Handle) Close() {
	h.closeSplice()
	h.mu.Lock()
	if h.stream != nil {
		h.stream.finish()
		h.stream = nil
	}
	if h.reading {
		h.f.readingHandles.Add(-1)
	}
	h.mu.Unlock()
	h.f.m.OpenHandles.Dec()
	f := h.f
	f.readersMu.Lock()
	hs := slices.DeleteFunc(f.readers[h.obj.id], func(o *Handle) bool { return o == h })
	if len(hs) == 0 {
		delete(f.readers, h.obj.id)
	} else {
		f.readers[h.obj.id] = hs
	}
	f.readersMu.Unlock()
}

// A read that starts exactly where the last one ended is sequential. Once a
// reader is sequential, reads a little behind or ahead still count: the
// kernel's readahead and parallel FUSE reads arrive out of order (up to a
// few MiB behind with page-cache readahead in flight). The tolerances are
// one part back and two parts forward.
func (h *Handle) isSequential(off int64) bool {
	if off == h.nextOff {
		return true
	}
	if !h.streak {
		return false
	}
	return off >= h.nextOff-h.f.cfg.PartSize && off <= h.nextOff+2*h.f.cfg.PartSize
}

// ReadAt fills p from off. It returns fewer bytes only at the end of the
// object.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	views, release, err := h.ReadViews(ctx, off, len(p))
	if err != nil {
		return 0, err
	}
	defer release()
	n := 0
	for _, v := range views {
		n += copy(p[n:], v)
	}
	return n, nil
}

// ReadViews is ReadAt without the copy: it returns the cached blocks' bytes
// covering [off, off+n) (shorter at the end of the object) and a release to
// call once they are sent.
func (h *Handle) ReadViews(ctx context.Context, off int64, n int) ([][]byte, func(), error) {
	size := h.obj.version.Size
	if off >= size || n == 0 {
		return nil, func() {}, nil
	}
	end := min(off+int64(n), size)
	sequential := h.plan(off, end)
	bs := int64(h.f.cfg.BlockSize)
	var views [][]byte
	var held []*cache.Block
	release := func() {
		for _, b := range held {
			b.Release()
		}
	}
	for pos := off; pos < end; {
		idx := pos / bs
		blk, err := h.f.fetch.get(ctx, h.obj, idx)
		if err != nil {
			release()
			return nil, nil, err
		}
		held = append(held, blk)
		lo, hi := pos-idx*bs, min(end-idx*bs, bs)
		if hi > int64(len(blk.Data)) {
			release()
			return nil, nil, fmt.Errorf("block %d of %s/%s holds %d bytes, want %d", idx, h.obj.bucket, h.obj.key, len(blk.Data), hi)
		}
		views = append(views, blk.Data[lo:hi])
		pos += hi - lo
	}
	if sequential {
		h.keepForTrailers(off, end, held)
	}
	if sequential && end%bs != 0 && end < size {
		// A sequential reader stopped inside this block (its buffer is not
		// aligned, or its reads are not): the rest of the block is what it
		// reads next, so keep it as fetched ahead even if the cache would
		// drop it now that it has been read.
		h.f.blocks.PutAhead(cache.BlockKey{Object: h.obj.id, Index: (end - 1) / bs}, held[len(held)-1])
	}
	h.f.m.PosixReadBytes.Add(float64(end - off))
	return views, release, nil
}

// plan updates the sequential-read state and starts prefetches. A
// sequential reader keeps up to window bytes requested ahead of it; new
// requests go out once less than half the window is left, so they are
// large (whole parts) rather than one block at a time. A reader that starts
// at the beginning of the object is fed by one whole-object stream instead,
// for as long as that stream serves it well. It reports whether the read
// was sequential.
func (h *Handle) plan(off, end int64) (sequential bool) {
	bs := int64(h.f.cfg.BlockSize)
	h.mu.Lock()
	first := !h.reading
	if first {
		h.reading = true
		h.f.readingHandles.Add(1)
	}
	sequential = h.isSequential(off)
	var from, to int64
	if sequential {
		limit := h.f.maxWindow() // more files may be reading now
		h.window = min(h.window, limit)
		if h.prefetchedTo-end < h.window/2 {
			blocks := h.f.fetch.blockCount(h.obj)
			from = max(h.prefetchedTo, off) / bs
			to = min((end+h.window+bs-1)/bs, blocks)
			h.prefetchedTo = to * bs
			h.window = min(h.window*2, limit)
			if from == 0 && to < blocks && !h.streamTried && !h.f.cfg.NoStream {
				h.streamTried = true
				h.stream = newStream(h.f.fetch, h.obj)
			}
		}
		h.nextOff = max(h.nextOff, end)
	} else {
		// A random read: only the blocks it needs, and the window starts
		// small again. Blocks it spans go out as one ranged GET (per part)
		// rather than one round trip after another.
		h.window = h.f.cfg.InitialWindow
		h.prefetchedTo = 0
		h.nextOff = end
		if h.stream != nil {
			h.stream.finish()
			h.stream = nil
		}
		if first, last := off/bs, (end-1)/bs; last > first {
			from, to = first, last+1
		}
	}
	h.streak = sequential
	s := h.stream
	h.mu.Unlock()
	if first {
		h.shareSplices()
	}
	reached := from
	if to > from {
		if reached = h.fetchAhead(s, from, to); reached < to {
			// What was not started is not coming: let the next read ask
			// again rather than fetch those blocks one at a time.
			h.mu.Lock()
			if h.prefetchedTo == to*bs {
				h.prefetchedTo = reached * bs
			}
			h.mu.Unlock()
		}
	}
	return sequential
}

// maxWindow is the largest window a handle may grow to now: MaxWindow, or
// less when that many reading files could not all hold theirs within half
// the block memory (the rest is for cache and readers' own blocks). Without
// the share, 64 readers with 128 MiB windows want four times the default
// 2 GiB and those whose prefetch finds no memory read block by block. Only
// handles that have read count: files opened long before they are read, or
// only for GPU reads, would otherwise shrink every reader's window (a
// process that opens its 16 files up front made 64 readers' 16 MiB 5 MiB).
func (f *FS) maxWindow() int64 {
	share := f.cfg.MemoryLimit / 2 / max(f.readingHandles.Load(), 1)
	share = share / int64(f.cfg.BlockSize) * int64(f.cfg.BlockSize)
	return max(min(f.cfg.MaxWindow, share), f.cfg.InitialWindow)
}

// fetchAhead starts downloads of blocks [from, to): claims for the stream
// while it is open, ranged GETs otherwise (and for what a stream that has
// just stopped did not claim). It returns the block it reached.
func (h *Handle) fetchAhead(s *stream, from, to int64) int64 {
	if s != nil {
		reached, open := s.extend(to)
		if open || reached >= to {
			return reached
		}
		from = max(from, reached)
	}
	return h.f.fetch.prefetch(h.obj, from, to)
}

// keepForTrailers keeps the blocks a sequential read has just passed for
// other open handles of the same version that will read them soon: several
// readers of one object (processes reading the same shards) go through it
// a few blocks apart, and without this, with no block cache or one that
// other readers churn, each reader behind the first fetches again what the
// first has just read.
func (h *Handle) keepForTrailers(off, end int64, held []*cache.Block) {
	others := h.f.otherReaders(h)
	if len(others) == 0 {
		return
	}
	bs := int64(h.f.cfg.BlockSize)
	first := off / bs
	for i, blk := range held {
		idx := first + int64(i)
		if min((idx+1)*bs, h.obj.version.Size) > end {
			break // not read to its end: this reader comes back for it
		}
		h.keepIfWanted(others, idx, blk)
	}
}

// keepIfWanted keeps block idx for the first of others that will read it
// soon, and reports whether one will.
func (h *Handle) keepIfWanted(others []*Handle, idx int64, blk *cache.Block) bool {
	start := idx * int64(h.f.cfg.BlockSize)
	for _, o := range others {
		if o.readsSoon(start, start+int64(len(blk.Data))) {
			h.f.blocks.Keep(cache.BlockKey{Object: h.obj.id, Index: idx}, blk)
			h.f.m.BlocksKept.Inc()
			return true
		}
	}
	return false
}

// readsSoon reports whether the handle is a sequential reader that has not
// read all of [start, end) yet and will reach start within the largest
// window it may grow to: what it would prefetch itself, so keeping such
// blocks for it takes no more memory than its own prefetch. A handle that
// has not read yet is not one: programs open files long before they read
// them (or only for GPU reads), and blocks kept for them would be a cache
// by another name.
func (h *Handle) readsSoon(start, end int64) bool {
	reach := h.f.maxWindow()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streak && h.nextOff < end && start < h.nextOff+reach
}

// otherReaders returns the open handles of h's object version other than h.
func (f *FS) otherReaders(h *Handle) []*Handle {
	f.readersMu.Lock()
	defer f.readersMu.Unlock()
	hs := f.readers[h.obj.id]
	if len(hs) < 2 {
		return nil
	}
	others := make([]*Handle, 0, len(hs)-1)
	for _, o := range hs {
		if o != h {
			others = append(others, o)
		}
	}
	return others
}
