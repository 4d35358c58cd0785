package vfs

import "sync"

// The prefetcher decides what a handle's blocks fetch ahead of its reader.
//
// What it fetches ahead: for a sequential reader, the blocks from the end
// of what it asked for so far up to window bytes past the read, asked for
// once less than half the window is left, so that each request is large
// (ranged GETs of one part each, fetcher.prefetch) rather than one block
// at a time. A reader that starts at the beginning of the object is fed
// instead by one GET of the whole object (a stream, fetch.go): the
// prefetcher claims the window's blocks for it as it would start ranged
// GETs, and once the stream takes no more claims (it failed, was slow,
// was overtaken by another reader, or went idle) ranged GETs fetch from
// where its claims reached. A random read fetches only the blocks it
// spans, as one GET per part.
//
// When the window grows: it starts at Config.InitialWindow (small, so that
// the first byte is quick) and doubles with every sequential read that
// asks for more. A read that starts where the last ended is sequential;
// once a reader is, reads up to one part behind or two ahead still are
// (the kernel's readahead and parallel reads arrive out of order).
//
// What resets it: a read that is not sequential, which also ends the
// stream (what it claimed still arrives). A spliced GET that ended on an
// error, or because another handle started reading, hands its reader over
// as a sequential reader at its place, without a stream (readState).
//
// What bounds it: Config.MaxWindow, and each reading handle's share of
// half of Config.MemoryLimit (maxWindow), so that many readers all
// prefetch; prefetches take only memory that is free at once, so a window
// is never held at the cost of a reader's own block, and what memory did
// not allow is asked for again at the next read.
type prefetcher struct {
	h *Handle

	// mu guards the fields below: the handle's reads may come in
	// parallel. Held only while planning, never while fetching.
	mu sync.Mutex
	// nextOff is where a sequential reader reads next.
	nextOff int64
	// window is how far ahead of the reader the next prefetch reaches.
	window int64
	// prefetchedTo is the end of what has been asked for so far.
	prefetchedTo int64
	// streak is set while the reader is sequential.
	streak bool
	// stream feeds the reader from one GET while it reads on from the start
	// of the object; nil once ranged GETs serve it.
	stream *stream
	// streamTried: a handle sends at most one whole-object GET.
	streamTried bool
}

// isSequential reports whether a read at off follows the reader: see the
// tolerances above. Called with p.mu held.
func (p *prefetcher) isSequential(off int64) bool {
	if off == p.nextOff {
		return true
	}
	if !p.streak {
		return false
	}
	partSize := p.h.f.cfg.PartSize
	return off >= p.nextOff-partSize && off <= p.nextOff+2*partSize
}

// plan follows the read of [off, end), starts what is to be fetched ahead
// of it, and reports whether the read was sequential.
func (p *prefetcher) plan(off, end int64) (sequential bool) {
	h := p.h
	f := h.f
	bs := int64(f.cfg.BlockSize)
	p.mu.Lock()
	if first, at, handedOver := h.st.startBlocks(h); first && handedOver {
		// A spliced GET served the reader up to at: one GET of the
		// object has been spent, so no stream.
		p.nextOff, p.streak, p.streamTried = at, true, true
	}
	sequential = p.isSequential(off)
	var from, to int64
	if sequential {
		limit := f.maxWindow() // more files may be reading now
		p.window = min(p.window, limit)
		if p.prefetchedTo-end < p.window/2 {
			blocks := f.fetch.blockCount(h.obj)
			from = max(p.prefetchedTo, off) / bs
			to = min((end+p.window+bs-1)/bs, blocks)
			p.prefetchedTo = to * bs
			p.window = min(p.window*2, limit)
			if from == 0 && to < blocks && !p.streamTried && !f.cfg.NoStream {
				p.streamTried = true
				p.stream = newStream(f.fetch, h.obj)
			}
		}
		p.nextOff = max(p.nextOff, end)
	} else {
		// A random read: only the blocks it needs, and the window starts
		// small again. Blocks it spans go out as one ranged GET (per part)
		// rather than one round trip after another.
		p.window = f.cfg.InitialWindow
		p.prefetchedTo = 0
		p.nextOff = end
		if p.stream != nil {
			p.stream.finish()
			p.stream = nil
		}
		if first, last := off/bs, (end-1)/bs; last > first {
			from, to = first, last+1
		}
	}
	p.streak = sequential
	s := p.stream
	h.st.moved(h, p.nextOff, p.streak)
	p.mu.Unlock()
	if to > from {
		if reached := p.fetchAhead(s, from, to); reached < to {
			// What was not started is not coming: let the next read ask
			// again rather than fetch those blocks one at a time.
			p.mu.Lock()
			if p.prefetchedTo == to*bs {
				p.prefetchedTo = reached * bs
			}
			p.mu.Unlock()
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
func (p *prefetcher) fetchAhead(s *stream, from, to int64) int64 {
	if s != nil {
		reached, open := s.extend(to)
		if open || reached >= to {
			return reached
		}
		from = max(from, reached)
	}
	return p.h.f.fetch.prefetch(p.h.obj, from, to)
}

// close ends the handle's stream once what it claimed is in.
func (p *prefetcher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stream != nil {
		p.stream.finish()
		p.stream = nil
	}
}
