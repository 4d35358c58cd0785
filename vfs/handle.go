package vfs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Handle is one open file: a pinned object version, and the readers its
// open chose to serve it (Open), asked in order for every read (Read).
type Handle struct {
	f   *FS
	obj object
	// directIO: the open bypasses the kernel's page cache
	// (Config.DirectIO), so its replies land in the reader's buffer.
	directIO bool
	// readers serve the handle's reads, asked in order: the spliced GET
	// (splice.go) where the open may splice, then the blocks
	// (blocks.go), which serve every read.
	readers []reader

	// mu guards the readers' state: each looks at the others' (a splice
	// starts only while no reader of the version reads through blocks, and
	// hands its place to the blocks when it ends).
	mu      sync.Mutex
	spliced *splicer // nil unless the open may splice
	blocks  blockReader
}

// A reader is one way of serving a handle's reads. read serves [off, off+n)
// (fewer bytes only at the end of the object) or, for a read it does not
// serve (not its kind of read, or its GET has ended), returns errFallBack,
// having handed the reader's place to the readers after it; the next one
// is asked then. close ends what it holds, at the handle's close.
type reader interface {
	read(ctx context.Context, off int64, n int) (Reply, error)
	close()
}

// errFallBack is a reader's answer to a read the next reader serves.
var errFallBack = errors.New("vfs: read falls back to the next reader")

// Reply is one read's bytes, in the form the reader that served it left
// them, for the FUSE layer to write out: the cached blocks' bytes (Views,
// to be written with one writev, then Release), bytes waiting in a pipe
// (Pipe, to be spliced on), or a copy (Data).
type Reply struct {
	Views   [][]byte
	Release func() // gives the blocks back once Views are written; nil without Views
	Pipe    *PipeReply
	Data    []byte
}

// PipeReply is a reply of N bytes waiting in the pipe FD. Done must be
// called once the reply has been written; it returns how many bytes left
// the pipe.
type PipeReply struct {
	FD, N int
	Done  func() (taken int)
}

// Size is how many bytes the reply holds.
func (r Reply) Size() int {
	switch {
	case r.Pipe != nil:
		return r.Pipe.N
	case r.Data != nil:
		return len(r.Data)
	}
	n := 0
	for _, v := range r.Views {
		n += len(v)
	}
	return n
}

// Open pins the entry's version, so that every byte read through the
// handle comes from that version or the read fails, and chooses how the
// handle is read: with direct I/O or through the page cache
// (Config.DirectIO), and for a direct-I/O open of a mount that splices, a
// spliced GET first (splice.go), the blocks after it.
func (f *FS) Open(e Entry) (*Handle, error) {
	if e.Dir {
		return nil, fmt.Errorf("%s: is a directory", e.Path())
	}
	f.m.OpenHandles.Inc()
	h := &Handle{f: f, obj: newObject(e), directIO: f.DirectIO(e.Version.Size)}
	h.blocks = blockReader{h: h, window: f.cfg.InitialWindow}
	if h.directIO && f.cfg.Splice {
		// Where the daemon's copy is the cost: the replies go straight
		// into the reader's buffer.
		h.spliced = &splicer{h: h}
		h.readers = append(h.readers, h.spliced)
	}
	h.readers = append(h.readers, &h.blocks)
	f.readersMu.Lock()
	f.readers[h.obj.id] = append(f.readers[h.obj.id], h)
	f.readersMu.Unlock()
	return h, nil
}

// Version is the version the handle reads.
func (h *Handle) Version() objstore.Version { return h.obj.version }

// DirectIO reports whether the open bypasses the kernel's page cache: its
// replies are copied by the kernel straight into the reader's buffer.
func (h *Handle) DirectIO() bool { return h.directIO }

// Read serves [off, off+n) of the object, fewer bytes only at its end:
// the handle's readers are asked in order, and the first that takes the
// read serves it.
func (h *Handle) Read(ctx context.Context, off int64, n int) (Reply, error) {
	for _, r := range h.readers {
		// A read that found the object changed has had its name
		// forgotten by the GET that found it (fetcher.gets' OnChanged).
		if rep, err := r.read(ctx, off, n); err != errFallBack {
			return rep, err
		}
	}
	// The blocks, the last reader, serve every read.
	return Reply{}, fmt.Errorf("%s/%s: no reader served the read at %d", h.obj.bucket, h.obj.key, off)
}

// Close releases the handle: its readers end in order (a spliced GET once
// a reply still being written has left its pipe; a stream once the blocks
// it claimed are in, as other readers may be waiting for them).
func (h *Handle) Close() {
	for _, r := range h.readers {
		r.close()
	}
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
