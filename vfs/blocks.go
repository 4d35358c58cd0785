package vfs

import (
	"context"
	"fmt"

	"github.com/s3gdsfs/s3gdsfs/cache"
)

// blockReader serves reads from the shared blocks (fetch.go): every read
// of every handle, the last of its readers. It follows a sequential reader
// with a prefetch window, whose blocks a whole-object stream fills while
// it serves the reader well (stream.go) and ranged GETs after it; a random
// read fetches only the blocks it needs. Its state is guarded by the
// handle's mu.
type blockReader struct {
	h *Handle
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
}

// A read that starts exactly where the last one ended is sequential. Once a
// reader is sequential, reads a little behind or ahead still count: the
// kernel's readahead and parallel FUSE reads arrive out of order (up to a
// few MiB behind with page-cache readahead in flight). The tolerances are
// one part back and two parts forward.
func (b *blockReader) isSequential(off int64) bool {
	if off == b.nextOff {
		return true
	}
	if !b.streak {
		return false
	}
	partSize := b.h.f.cfg.PartSize
	return off >= b.nextOff-partSize && off <= b.nextOff+2*partSize
}

// read returns the cached blocks' bytes covering [off, off+n) (shorter at
// the end of the object), for the FUSE layer to write straight from them,
// and the release to call once they are written.
func (b *blockReader) read(ctx context.Context, off int64, n int) (Reply, error) {
	h := b.h
	size := h.obj.version.Size
	if off >= size || n == 0 {
		return Reply{Release: func() {}}, nil
	}
	end := min(off+int64(n), size)
	sequential := b.plan(off, end)
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
			return Reply{}, err
		}
		held = append(held, blk)
		lo, hi := pos-idx*bs, min(end-idx*bs, bs)
		if hi > int64(len(blk.Data)) {
			release()
			return Reply{}, fmt.Errorf("block %d of %s/%s holds %d bytes, want %d", idx, h.obj.bucket, h.obj.key, len(blk.Data), hi)
		}
		views = append(views, blk.Data[lo:hi])
		pos += hi - lo
	}
	if sequential {
		b.keepForTrailers(off, end, held)
	}
	if sequential && end%bs != 0 && end < size {
		// A sequential reader stopped inside this block (its buffer is not
		// aligned, or its reads are not): the rest of the block is what it
		// reads next, so keep it as fetched ahead even if the cache would
		// drop it now that it has been read.
		h.f.blocks.PutAhead(cache.BlockKey{Object: h.obj.id, Index: (end - 1) / bs}, held[len(held)-1])
	}
	h.f.m.PosixReadBytes.Add(float64(end - off))
	return Reply{Views: views, Release: release}, nil
}

// plan updates the sequential-read state and starts prefetches. A
// sequential reader keeps up to window bytes requested ahead of it; new
// requests go out once less than half the window is left, so they are
// large (whole parts) rather than one block at a time. A reader that starts
// at the beginning of the object is fed by one whole-object stream instead,
// for as long as that stream serves it well. It reports whether the read
// was sequential.
func (b *blockReader) plan(off, end int64) (sequential bool) {
	h := b.h
	bs := int64(h.f.cfg.BlockSize)
	h.mu.Lock()
	first := !b.reading
	if first {
		b.reading = true
		h.f.readingHandles.Add(1)
	}
	sequential = b.isSequential(off)
	var from, to int64
	if sequential {
		limit := h.f.maxWindow() // more files may be reading now
		b.window = min(b.window, limit)
		if b.prefetchedTo-end < b.window/2 {
			blocks := h.f.fetch.blockCount(h.obj)
			from = max(b.prefetchedTo, off) / bs
			to = min((end+b.window+bs-1)/bs, blocks)
			b.prefetchedTo = to * bs
			b.window = min(b.window*2, limit)
			if from == 0 && to < blocks && !b.streamTried && !h.f.cfg.NoStream {
				b.streamTried = true
				b.stream = newStream(h.f.fetch, h.obj)
			}
		}
		b.nextOff = max(b.nextOff, end)
	} else {
		// A random read: only the blocks it needs, and the window starts
		// small again. Blocks it spans go out as one ranged GET (per part)
		// rather than one round trip after another.
		b.window = h.f.cfg.InitialWindow
		b.prefetchedTo = 0
		b.nextOff = end
		if b.stream != nil {
			b.stream.finish()
			b.stream = nil
		}
		if first, last := off/bs, (end-1)/bs; last > first {
			from, to = first, last+1
		}
	}
	b.streak = sequential
	s := b.stream
	h.mu.Unlock()
	if first {
		h.shareSplices()
	}
	if to > from {
		if reached := b.fetchAhead(s, from, to); reached < to {
			// What was not started is not coming: let the next read ask
			// again rather than fetch those blocks one at a time.
			h.mu.Lock()
			if b.prefetchedTo == to*bs {
				b.prefetchedTo = reached * bs
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
// just stopped did not claim: the stream hands over to ranged GETs). It
// returns the block it reached.
func (b *blockReader) fetchAhead(s *stream, from, to int64) int64 {
	if s != nil {
		reached, open := s.extend(to)
		if open || reached >= to {
			return reached
		}
		from = max(from, reached)
	}
	return b.h.f.fetch.prefetch(b.h.obj, from, to)
}

// takeOver makes the blocks serve a sequential reader at off that another
// reader served until now (a spliced GET that ended), unless they have
// served the handle already: no whole-object stream, as one GET of the
// object has been spent.
func (b *blockReader) takeOver(off int64) {
	if !b.reading {
		b.nextOff, b.streak, b.streamTried = off, true, true
	}
}

// close ends the handle's stream once what it claimed is in, and gives
// back the handle's share of block memory.
func (b *blockReader) close() {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	if b.stream != nil {
		b.stream.finish()
		b.stream = nil
	}
	if b.reading {
		b.h.f.readingHandles.Add(-1)
	}
}

// keepForTrailers keeps the blocks a sequential read has just passed for
// other open handles of the same version that will read them soon: several
// readers of one object (processes reading the same shards) go through it
// a few blocks apart, and without this, with no block cache or one that
// other readers churn, each reader behind the first fetches again what the
// first has just read.
func (b *blockReader) keepForTrailers(off, end int64, held []*cache.Block) {
	h := b.h
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
// soon, if one will.
func (h *Handle) keepIfWanted(others []*Handle, idx int64, blk *cache.Block) {
	start := idx * int64(h.f.cfg.BlockSize)
	for _, o := range others {
		if o.readsSoon(start, start+int64(len(blk.Data))) {
			h.f.blocks.Keep(cache.BlockKey{Object: h.obj.id, Index: idx}, blk)
			h.f.m.BlocksKept.Inc()
			return
		}
	}
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
	return h.blocks.streak && h.blocks.nextOff < end && start < h.blocks.nextOff+reach
}
