package vfs

import (
	"context"
	"sync/atomic"
)

// Filling the page cache ahead of a mapping's faults (Config.FillPageCache).
//
// A program that maps a file and copies out of the mapping
// (safetensors.torch.load_file, torch.load with mmap) waits fault after
// fault for the kernel's readahead. Each of those FUSE reads finds its
// bytes in the blocks already; what the program waits for is the reply's
// copy into the page cache, made one readahead at a time while it waits.
// For a stream of reads that the page cache sends (Handle.ReadPageCache),
// the daemon instead copies each block it fetches ahead into the page
// cache itself (PageCache.Store: the kernel's NOTIFY_STORE), on goroutines
// beside the program, so that its faults find the pages there and the
// kernel sends fewer reads. Reads for direct-I/O read(2)s (Handle.Read)
// are never filled: no reader would take those bytes from the page cache,
// and the copy would be for nothing.
//
// A block is filled once it is in (a fill never starts a download of its
// own), unless the stream's reads have reached it meanwhile (the kernel
// asked for those pages itself), the page cache has it already (another
// stream of the handle filled it, or a read asked for it) or the handle
// has closed. At most fillWorkers blocks of the whole mount are being
// copied at once, and each range a stream fetches ahead is filled in
// order by at most fillRangeWorkers of them.

// PageCache is the kernel's page cache of one open file, which the FUSE
// layer gives a handle (Handle.SetPageCache). Store copies b into it at
// off; an error means the kernel took none of it, and the handle fills
// no more.
type PageCache interface {
	Store(off int64, b []byte) error
}

const (
	// fillWorkers bounds the blocks the mount copies into page caches at
	// once, so that fills take a few CPUs, not all of them.
	fillWorkers = 8
	// fillRangeWorkers is how many blocks of one prefetched range are
	// copied at once, so that the range's far blocks go in while the
	// reader works through its near ones. Not tuned: fills are off by
	// default until measured (docs/benchmarks.md).
	fillRangeWorkers = 4
)

// SetPageCache gives the handle the page cache it may fill ahead of the
// reads the page cache sends (Config.FillPageCache). Call it before the
// first read.
func (h *Handle) SetPageCache(pc PageCache) { h.cache = pc }

// fills reports whether the handle fills its page cache.
func (h *Handle) fills() bool {
	return h.cache != nil && h.f.cfg.FillPageCache && !h.cacheRefused.Load()
}

// fill copies blocks (in the order given: nearest to the reader first)
// into the handle's page cache as each comes in, for stream s.
func (p *prefetcher) fill(s *seqStream, blocks []int64) {
	var next atomic.Int64
	for range min(len(blocks), fillRangeWorkers) {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(blocks)) {
					return
				}
				p.fillBlock(s, blocks[i])
			}
		}()
	}
}

// fillBlock copies block idx into the page cache, unless the stream's
// reads have reached it, the handle closed or stopped filling, or the
// block is neither held nor on its way.
func (p *prefetcher) fillBlock(s *seqStream, idx int64) {
	h := p.h
	f := h.f
	skip := func(reason string) { f.m.PageCacheFillSkips.WithLabelValues(reason).Inc() }
	if h.closed.Load() || !h.fills() {
		skip("closed")
		return
	}
	if p.reached(s, idx) {
		skip("read")
		return
	}
	blk, err := f.fetch.held(context.Background(), h.obj, idx)
	if err != nil || blk == nil {
		skip("absent")
		return
	}
	defer blk.Release()
	// A slot is taken once the block is in: the slots bound the copies,
	// not the waits for downloads, which would hold other files' fills
	// back behind a slow GET.
	f.fillSlots <- struct{}{}
	defer func() { <-f.fillSlots }()
	if h.closed.Load() || !h.fills() {
		skip("closed")
		return
	}
	if reason := p.claim(s, idx); reason != "" {
		skip(reason)
		return
	}
	if err := h.cache.Store(idx*int64(f.cfg.BlockSize), blk.Data); err != nil {
		p.unclaim(idx)
		if !h.cacheRefused.Swap(true) {
			f.log.Debug("page cache fill refused: the handle fills no more", "bucket", h.obj.bucket, "key", h.obj.key, "err", err)
		}
		skip("refused")
		return
	}
	f.m.PageCacheFillBytes.Add(float64(len(blk.Data)))
}

// reached reports whether s's reads have asked for block idx already:
// the kernel has those pages or is reading them.
func (p *prefetcher) reached(s *seqStream, idx int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reachedLocked(s, idx)
}

func (p *prefetcher) reachedLocked(s *seqStream, idx int64) bool {
	bs := int64(p.h.f.cfg.BlockSize)
	if s.back {
		return idx*bs >= s.low
	}
	return (idx+1)*bs <= s.nextOff
}

// claim marks block idx as going into the page cache and returns "", or
// the reason it is not to be filled: s's reads have reached it (read), or
// the page cache has it already, from another stream's fill or a read of
// its own (filled).
func (p *prefetcher) claim(s *seqStream, idx int64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reachedLocked(s, idx) {
		return "read"
	}
	if _, ok := p.inPageCache[idx]; ok {
		return "filled"
	}
	p.markInPageCache(idx, idx+1)
	return ""
}

// unclaim forgets block idx: its fill failed.
func (p *prefetcher) unclaim(idx int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inPageCache, idx)
}

// markInPageCache records blocks [from, to) as in the page cache. p.mu
// is held.
func (p *prefetcher) markInPageCache(from, to int64) {
	if from >= to {
		return
	}
	if p.inPageCache == nil {
		p.inPageCache = make(map[int64]struct{})
	}
	for i := from; i < to; i++ {
		p.inPageCache[i] = struct{}{}
	}
}
