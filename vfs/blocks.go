package vfs

import (
	"context"
	"fmt"

	"github.com/s3gdsfs/s3gdsfs/cache"
)

// blockReader serves reads from the shared blocks (fetch.go): every read
// of every handle, the last of its readers. Its prefetcher (prefetch.go)
// follows the reader and decides what is fetched ahead of it; a block it
// has read is kept for another handle of the version that reads behind it
// (readState.readSoon).
type blockReader struct {
	h     *Handle
	ahead prefetcher
}

// read returns the cached blocks' bytes covering [off, off+n) (shorter at
// the end of the object), for the FUSE layer to write straight from them,
// and the release to call once they are written.
func (b *blockReader) read(ctx context.Context, off int64, n int, cached bool) (Reply, error) {
	h := b.h
	size := h.obj.version.Size
	if off >= size || n == 0 {
		return Reply{Release: func() {}}, nil
	}
	end := min(off+int64(n), size)
	sequential := b.ahead.plan(off, end)
	views, held, err := h.blockViews(ctx, off, end)
	if err != nil {
		return Reply{}, err
	}
	release := func() { releaseBlocks(held) }
	if sequential {
		b.keepForTrailers(off, end, held)
	}
	if bs := int64(h.f.cfg.BlockSize); sequential && end%bs != 0 && end < size {
		// A sequential reader stopped inside this block (its buffer is not
		// aligned, or its reads are not): the rest of the block is what it
		// reads next, so keep it as fetched ahead even if the cache would
		// drop it now that it has been read.
		h.f.blocks.PutAhead(cache.BlockKey{Object: h.obj.id, Index: (end - 1) / bs}, held[len(held)-1])
	}
	h.f.m.PosixReadBytes.Add(float64(end - off))
	return Reply{Views: views, Release: release}, nil
}

// blockViews returns the cached blocks' bytes covering [off, end), each
// block held for the caller, fetching those nobody has.
func (h *Handle) blockViews(ctx context.Context, off, end int64) (views [][]byte, held []*cache.Block, err error) {
	bs := int64(h.f.cfg.BlockSize)
	for pos := off; pos < end; {
		idx := pos / bs
		blk, err := h.f.fetch.get(ctx, h.obj, idx)
		if err != nil {
			releaseBlocks(held)
			return nil, nil, err
		}
		held = append(held, blk)
		lo, hi := pos-idx*bs, min(end-idx*bs, bs)
		if hi > int64(len(blk.Data)) {
			releaseBlocks(held)
			return nil, nil, fmt.Errorf("block %d of %s/%s holds %d bytes, want %d", idx, h.obj.bucket, h.obj.key, len(blk.Data), hi)
		}
		views = append(views, blk.Data[lo:hi])
		pos += hi - lo
	}
	return views, held, nil
}

// releaseBlocks gives back the references blockViews took.
func releaseBlocks(held []*cache.Block) {
	for _, b := range held {
		b.Release()
	}
}

// close ends the handle's stream once what it claimed is in.
func (b *blockReader) close() { b.ahead.close() }

// keepForTrailers keeps the blocks a sequential read has just passed for
// other open handles of the same version that will read them soon: several
// readers of one object (processes reading the same shards) go through it
// a few blocks apart, and without this, with no block cache or one that
// other readers churn, each reader behind the first fetches again what the
// first has just read.
func (b *blockReader) keepForTrailers(off, end int64, held []*cache.Block) {
	h := b.h
	if !h.st.hasOthers() {
		return
	}
	reach := h.f.maxWindow()
	bs := int64(h.f.cfg.BlockSize)
	first := off / bs
	for i, blk := range held {
		idx := first + int64(i)
		if min((idx+1)*bs, h.obj.version.Size) > end {
			break // not read to its end: this reader comes back for it
		}
		// Kept for another reader that would prefetch it itself: no
		// more memory than its own prefetch.
		start := idx * bs
		if h.st.readSoon(h, start, start+int64(len(blk.Data)), reach) {
			h.f.blocks.Keep(cache.BlockKey{Object: h.obj.id, Index: idx}, blk)
			h.f.m.BlocksKept.Inc()
		}
	}
}
