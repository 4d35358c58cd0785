package vfs

import (
	"context"
	"fmt"
	"sync"

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
}

// Open pins the entry's version: every byte read through the handle comes
// from that version or the read fails.
func (f *FS) Open(e Entry) (*Handle, error) {
	if e.Dir {
		return nil, fmt.Errorf("%s: is a directory", e.Path())
	}
	f.m.OpenHandles.Inc()
	return &Handle{f: f, obj: newObject(e), window: f.cfg.InitialWindow}, nil
}

// Size is the pinned version's size.
func (h *Handle) Size() int64 { return h.obj.version.Size }

// Version is the version the handle reads.
func (h *Handle) Version() objstore.Version { return h.obj.version }

// Close releases the handle.
func (h *Handle) Close() { h.f.m.OpenHandles.Dec() }

// A read that starts exactly where the last one ended is sequential. Once a
// reader is sequential, reads a little behind or ahead still count: the
// kernel's readahead and parallel FUSE reads arrive slightly out of order.
// The tolerances are one block back and two parts forward.
func (h *Handle) isSequential(off int64) bool {
	if off == h.nextOff {
		return true
	}
	if !h.streak {
		return false
	}
	return off >= h.nextOff-int64(h.f.cfg.BlockSize) && off <= h.nextOff+2*h.f.cfg.PartSize
}

// ReadAt fills p from off. It returns fewer bytes only at the end of the
// object.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	size := h.obj.version.Size
	if off >= size || len(p) == 0 {
		return 0, nil
	}
	end := min(off+int64(len(p)), size)
	h.plan(off, end)

	bs := int64(h.f.cfg.BlockSize)
	n := 0
	for pos := off; pos < end; {
		idx := pos / bs
		blk, err := h.f.fetch.get(ctx, h.obj, idx)
		if err != nil {
			return n, err
		}
		inBlock := pos - idx*bs
		if inBlock >= int64(len(blk.Data)) {
			blk.Release()
			return n, fmt.Errorf("block %d of %s/%s holds %d bytes, want offset %d", idx, h.obj.bucket, h.obj.key, len(blk.Data), inBlock)
		}
		c := copy(p[n:end-off], blk.Data[inBlock:])
		blk.Release()
		n += c
		pos += int64(c)
	}
	h.f.m.PosixReadBytes.Add(float64(n))
	return n, nil
}

// ReadView is ReadAt without the copy: when [off, off+n) lies inside one
// block (the kernel's aligned reads do), it returns that block's bytes and a
// release to call once they are sent. Otherwise it returns a nil view and
// the caller uses ReadAt.
func (h *Handle) ReadView(ctx context.Context, off int64, n int) ([]byte, func(), error) {
	size := h.obj.version.Size
	if off >= size || n == 0 {
		return []byte{}, func() {}, nil
	}
	end := min(off+int64(n), size)
	bs := int64(h.f.cfg.BlockSize)
	idx := off / bs
	if (end-1)/bs != idx {
		return nil, nil, nil
	}
	h.plan(off, end)
	blk, err := h.f.fetch.get(ctx, h.obj, idx)
	if err != nil {
		return nil, nil, err
	}
	lo, hi := off-idx*bs, end-idx*bs
	if hi > int64(len(blk.Data)) {
		blk.Release()
		return nil, nil, fmt.Errorf("block %d of %s/%s holds %d bytes, want %d", idx, h.obj.bucket, h.obj.key, len(blk.Data), hi)
	}
	h.f.m.PosixReadBytes.Add(float64(end - off))
	return blk.Data[lo:hi], blk.Release, nil
}

// plan updates the sequential-read state and starts prefetches. A
// sequential reader keeps up to window bytes requested ahead of it; new
// requests go out once less than half the window is left, so they are
// large (whole parts) rather than one block at a time.
func (h *Handle) plan(off, end int64) {
	bs := int64(h.f.cfg.BlockSize)
	h.mu.Lock()
	sequential := h.isSequential(off)
	var from, to int64
	if sequential {
		if h.prefetchedTo-end < h.window/2 {
			from = max(h.prefetchedTo, off) / bs
			target := end + h.window
			to = (target + bs - 1) / bs
			h.prefetchedTo = to * bs
			h.window = min(h.window*2, h.f.cfg.MaxWindow)
		}
		h.nextOff = max(h.nextOff, end)
	} else {
		// A random read: only the blocks it needs, one ranged GET each, and
		// the window starts small again.
		h.window = h.f.cfg.InitialWindow
		h.prefetchedTo = 0
		h.nextOff = end
	}
	h.streak = sequential
	h.mu.Unlock()
	if to > from {
		h.f.fetch.prefetch(h.obj, from, to)
	}
}
