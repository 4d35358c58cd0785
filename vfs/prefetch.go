package vfs

import "sync"

// The prefetcher decides what a handle's blocks fetch ahead of its readers.
//
// Whom it follows: the sequential streams of reads through the handle, up
// to maxStreams of them. One reader is one stream; so is each thread of a
// loader that reads one file with large preads on one descriptor (the
// kernel cuts each pread into a run of in-order FUSE reads of at most
// 1 MiB, one at a time per thread with direct I/O), and each region that
// threads fault through a mapping of the file (the kernel's readahead
// sends its reads in order, a few at a time). A read belongs to the stream
// it continues: one that starts where the stream's last read ended, or,
// once the stream is sequential, one up to a part behind or two ahead of
// that (the kernel's readahead and parallel reads arrive out of order);
// the nearest such stream takes it. A read that continues none starts a
// new stream there, which fetches only the blocks that read spans (as one
// GET per part), as a random read does; its next read, if it continues
// it, makes it sequential. A new stream takes the place of the streams a
// reader has finished (each one that has run into what another stream
// read from its start: a thread's pread that reached the next thread's)
// and, with maxStreams followed, of the one read least recently.
//
// What a stream fetches ahead: the blocks from the end of what it asked
// for so far up to its window past the read, asked for once less than
// half the window is left, so that each request is large (ranged GETs of
// one part each, fetcher.prefetch) rather than one block at a time. It
// fetches no further than where another stream of the handle started
// after it: that region is the other stream's to fetch, and a loader's
// pread does not read on into the next thread's. A reader that starts at
// the beginning of the object, while it is the handle's only stream, is
// fed instead by one GET of the whole object (a whole-object stream,
// fetch.go): the prefetcher claims the window's blocks for it as it would
// start ranged GETs, and once that stream takes no more claims (it
// failed, was slow, was overtaken by another reader, or went idle) ranged
// GETs fetch from where its claims reached. A second stream in the handle
// ends it (what it claimed still arrives): several readers at once are
// served by ranged GETs in parallel, which one GET cannot be.
//
// A stream may also run backward: each read ending where the one before
// began, as a copy out of a mapping does when it runs from its end (glibc's
// memmove copies backward when the destination lies above the source, and
// each fault's read-around then reads the pages just below those read). Its
// window reaches below the read instead, grown and bounded alike; without
// it each such read would be a random read, a ranged GET of its own.
//
// When a window grows: it starts at Config.InitialWindow (small, so that
// the first byte is quick) and doubles with every sequential read of its
// stream that asks for more.
//
// What bounds it: Config.MaxWindow, and each reading handle's share of
// half of Config.MemoryLimit divided among its streams (windowLimit), so
// that many readers all prefetch; prefetches take only memory that is free
// at once, so a window is never held at the cost of a reader's own block,
// and what memory did not allow is asked for again at the next read.
//
// A spliced GET that ended on an error, or because another handle started
// reading, hands its reader over as a sequential stream at its place,
// without a whole-object stream (readState).
type prefetcher struct {
	h *Handle

	// mu guards the fields below: the handle's reads may come in
	// parallel. Held only while planning, never while fetching.
	mu sync.Mutex
	// streams are the sequential readers followed, in no order.
	streams []*seqStream
	// last is the stream of the latest read.
	last *seqStream
	// clock orders the streams' reads, for eviction.
	clock uint64
	// whole feeds wholeFor from one GET while it reads on from the start
	// of the object, the handle's only stream; nil once ranged GETs
	// serve it.
	whole    *stream
	wholeFor *seqStream
	// wholeTried: a handle sends at most one whole-object GET.
	wholeTried bool
}

// maxStreams is how many sequential readers one handle follows at once:
// as many as a loader has threads reading one descriptor (and more than
// the kernel reads ahead for at once in a mapping). Beyond it the reader
// read least recently loses its stream, and its next read starts anew.
const maxStreams = 64

// seqStream is one sequential reader of a handle.
type seqStream struct {
	// start is where the stream began: other streams fetch no further.
	start int64
	// nextOff is where it reads next.
	nextOff int64
	// window is how far ahead of the reader the next prefetch reaches.
	window int64
	// prefetchedTo is the end of what has been asked for so far.
	prefetchedTo int64
	// streak is set once the stream has read sequentially.
	streak bool
	// back: the stream reads backward (see above). low is where its
	// latest read began, prefetchedFrom the lowest byte asked for.
	back                bool
	low, prefetchedFrom int64
	// used is the prefetcher's clock at its latest read.
	used uint64
}

// continues reports how far a read at off is from where s reads next, and
// whether it continues s: see the tolerances above.
func (s *seqStream) continues(off, partSize int64) (dist int64, ok bool) {
	if s.back {
		return 0, false
	}
	dist = off - s.nextOff
	if dist == 0 {
		return 0, true
	}
	if !s.streak || dist < -partSize || dist > 2*partSize {
		return 0, false
	}
	return max(dist, -dist), true
}

// continuesBack reports how far a read ending at end is from where s's
// latest read began, and whether it continues s backward: it ends right
// there (which turns a stream of one read backward), or, once s runs
// backward, up to a part above or two below, mirroring continues.
func (s *seqStream) continuesBack(end, partSize int64) (dist int64, ok bool) {
	if s.streak && !s.back {
		return 0, false
	}
	dist = s.low - end
	if dist == 0 {
		return 0, true
	}
	if !s.back || dist < -partSize || dist > 2*partSize {
		return 0, false
	}
	return max(dist, -dist), true
}

// match returns the stream a read of [off, end) continues, the nearest
// one, forward or backward, or nil. Called with p.mu held.
func (p *prefetcher) match(off, end int64) *seqStream {
	partSize := p.h.f.cfg.PartSize
	var best *seqStream
	var bestDist int64
	for _, s := range p.streams {
		if d, ok := s.continues(off, partSize); ok && (best == nil || d < bestDist) {
			best, bestDist = s, d
		}
		if d, ok := s.continuesBack(end, partSize); ok && (best == nil || d < bestDist) {
			best, bestDist = s, d
		}
	}
	return best
}

// add starts a stream at off, in the place of finished streams and, with
// maxStreams followed, of the one read least recently. A second stream
// ends the whole-object stream. Called with p.mu held.
func (p *prefetcher) add(off int64) *seqStream {
	kept := p.streams[:0]
	for _, s := range p.streams {
		if !p.finished(s) {
			kept = append(kept, s)
		} else {
			p.dropped(s)
		}
	}
	clear(p.streams[len(kept):])
	p.streams = kept
	if len(p.streams) >= maxStreams {
		oldest := 0
		for i, s := range p.streams {
			if s.used < p.streams[oldest].used {
				oldest = i
			}
		}
		p.dropped(p.streams[oldest])
		p.streams = append(p.streams[:oldest], p.streams[oldest+1:]...)
	}
	s := &seqStream{start: off, nextOff: off, low: off, window: p.h.f.cfg.InitialWindow}
	p.streams = append(p.streams, s)
	if p.whole != nil && len(p.streams) > 1 {
		p.endWhole()
	}
	return s
}

// finished reports whether s has read to the end of the object, or has
// run into what another stream read from its start: its reader went on
// elsewhere, or now reads where the other stream has fetched. Called with p.mu held.
func (p *prefetcher) finished(s *seqStream) bool {
	if s.back {
		return s.low <= 0 // read down to the start
	}
	if s.nextOff >= p.h.obj.version.Size {
		return true // read to the end
	}
	for _, t := range p.streams {
		if t != s && t.start <= s.nextOff && s.nextOff <= t.nextOff && t.start > s.start {
			return true
		}
	}
	return false
}

// dropped forgets s: its whole-object stream, if it has one, ends.
func (p *prefetcher) dropped(s *seqStream) {
	if p.wholeFor == s {
		p.endWhole()
	}
	if p.last == s {
		p.last = nil
	}
}

// endWhole ends the whole-object stream once what it claimed is in.
func (p *prefetcher) endWhole() {
	if p.whole != nil {
		p.whole.finish()
	}
	p.whole, p.wholeFor = nil, nil
}

// fenceFor is the block at which s's prefetch stops: where the nearest
// other stream that started at or past end began, or blocks. Called with
// p.mu held.
func (p *prefetcher) fenceFor(s *seqStream, end, blocks int64) int64 {
	fence := blocks
	bs := int64(p.h.f.cfg.BlockSize)
	for _, t := range p.streams {
		if t != s && t.start >= end {
			fence = min(fence, t.start/bs)
		}
	}
	return fence
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
		// object has been spent, so no whole-object stream.
		p.wholeTried = true
		p.streams = append(p.streams, &seqStream{nextOff: at, window: f.cfg.InitialWindow, streak: true})
	}
	s := p.match(off, end)
	sequential = s != nil
	if s == nil {
		// The handle's first read, at the beginning: a reader that
		// starts there reads on (the kernel's readahead treats a first
		// read at 0 alike).
		sequential = off == 0 && p.clock == 0
		s = p.add(off)
	}
	p.clock++
	s.used = p.clock
	p.last = s
	var from, to int64
	if sequential && (s.back || (!s.streak && end == s.low && off != s.nextOff)) {
		if !s.back { // its second read, ending where its first began
			s.back, s.prefetchedFrom = true, s.low/bs*bs
		}
		limit := f.windowLimit(len(p.streams))
		s.window = min(s.window, limit)
		if off-s.prefetchedFrom < s.window/2 {
			from, to = max(off-s.window, 0)/bs, s.prefetchedFrom/bs
			s.prefetchedFrom = from * bs
			s.window = min(s.window*2, limit)
		}
		s.low = min(s.low, off)
		s.streak = true
	} else if sequential {
		limit := f.windowLimit(len(p.streams)) // more files or streams may be reading now
		s.window = min(s.window, limit)
		if s.prefetchedTo-end < s.window/2 {
			blocks := f.fetch.blockCount(h.obj)
			from = max(s.prefetchedTo, off) / bs
			to = min((end+s.window+bs-1)/bs, p.fenceFor(s, end, blocks))
			s.prefetchedTo = max(s.prefetchedTo, to*bs)
			s.window = min(s.window*2, limit)
			if from == 0 && to < blocks && len(p.streams) == 1 && !p.wholeTried && !f.cfg.NoStream {
				p.wholeTried = true
				p.whole, p.wholeFor = newStream(f.fetch, h.obj), s
			}
		}
		s.nextOff = max(s.nextOff, end)
		s.streak = true
	} else {
		// A random read, or the first of a new stream: only the blocks
		// it needs. Blocks it spans go out as one ranged GET (per part)
		// rather than one round trip after another.
		s.nextOff = end
		if first, last := off/bs, (end-1)/bs; last > first {
			from, to = first, last+1
		}
	}
	var whole *stream
	if p.wholeFor == s {
		whole = p.whole
	}
	h.st.moved(h, s.nextOff, sequential)
	p.mu.Unlock()
	if to > from {
		if reached := p.fetchAhead(whole, from, to); reached < to {
			// What was not started is not coming: let the next read ask
			// again rather than fetch those blocks one at a time.
			p.mu.Lock()
			if s.back && s.prefetchedFrom == from*bs {
				s.prefetchedFrom = to * bs // the blocks next to the reader may not have started
			} else if !s.back && s.prefetchedTo == to*bs {
				s.prefetchedTo = reached * bs
			}
			p.mu.Unlock()
		}
	}
	return sequential
}

// maxWindow is the largest window a handle's one stream may grow to now:
// see windowLimit.
func (f *FS) maxWindow() int64 { return f.windowLimit(1) }

// windowLimit is the largest window each of a handle's streams may grow
// to now: MaxWindow, or less when that many reading files, with so many
// streams each, could not all hold theirs within half the block memory
// (the rest is for cache and readers' own blocks). Without the share, 64
// readers with 128 MiB windows want four times the default 2 GiB and those
// whose prefetch finds no memory read block by block. Only handles that
// have read count: files opened long before they are read, or only for
// GPU reads, would otherwise shrink every reader's window (a process that
// opens its 16 files up front made 64 readers' 16 MiB 5 MiB).
func (f *FS) windowLimit(streams int) int64 {
	share := f.cfg.MemoryLimit / 2 / max(f.readingHandles.Load(), 1) / int64(max(streams, 1))
	share = share / int64(f.cfg.BlockSize) * int64(f.cfg.BlockSize)
	return max(min(f.cfg.MaxWindow, share), f.cfg.InitialWindow)
}

// fetchAhead starts downloads of blocks [from, to): claims for the
// whole-object stream while it is open, ranged GETs otherwise (and for
// what a stream that has just stopped did not claim: the stream hands over
// to ranged GETs). It returns the block it reached.
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

// window is the window of the stream that read last (0 before any read).
func (p *prefetcher) window() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return 0
	}
	return p.last.window
}

// close ends the handle's whole-object stream once what it claimed is in.
func (p *prefetcher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endWhole()
}
