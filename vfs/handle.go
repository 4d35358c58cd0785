package vfs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

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
	// st is what the version's open handles know of each other, this
	// one's place among them included. The readers keep their own state
	// and learn about each other only through st's methods.
	st *readState
	// readers serve the handle's reads, asked in order: the spliced GET
	// (splice.go) where the open may splice, then the blocks
	// (blocks.go), which serve every read.
	readers []reader
	spliced *splicer // nil unless the open may splice
	blocks  blockReader
	closed  atomic.Bool
}

// A reader is one way of serving a handle's reads. read serves [off, off+n)
// (fewer bytes only at the end of the object; cached: the page cache sent
// the read, see Handle.ReadPageCache) or, for a read it does not
// serve (not its kind of read, or its GET has ended), returns errFallBack,
// having handed the handle's place to the readers after it (readState);
// the next one is asked then. close ends what it holds, at the handle's
// close. No reader holds a lock when it returns: a reply that is written
// after read returns (a spliced one) holds its reader's turn instead,
// which the reply's Done gives back (splice.go).
type reader interface {
	read(ctx context.Context, off int64, n int, cached bool) (Reply, error)
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
// the pipe. Until Done, the pipe is the reply's: the handle's next spliced
// read and its close wait for it, within Config.ReadTimeout, and then give
// the GET up to the Done, whenever it comes.
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
	h.blocks = blockReader{h: h, ahead: prefetcher{h: h}}
	if h.directIO && f.cfg.Splice {
		// Where the daemon's copy is the cost: the replies go straight
		// into the reader's buffer.
		h.spliced = &splicer{h: h, first: make(chan struct{})}
		h.readers = append(h.readers, h.spliced)
	}
	h.readers = append(h.readers, &h.blocks)
	h.st = f.joinReaders(h)
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
	return h.read(ctx, off, n, false)
}

// ReadPageCache is Read for a read the kernel's page cache sent (its
// readahead, a fault of a mapping) rather than a direct-I/O read(2): such
// reads come in the kernel's order, not a stream's, so no stream feed
// serves them (splice.go).
func (h *Handle) ReadPageCache(ctx context.Context, off int64, n int) (Reply, error) {
	return h.read(ctx, off, n, true)
}

func (h *Handle) read(ctx context.Context, off int64, n int, cached bool) (Reply, error) {
	for _, r := range h.readers {
		// A read that found the object changed has had its name
		// forgotten by the GET that found it (fetcher.gets' OnChanged).
		if rep, err := r.read(ctx, off, n, cached); err != errFallBack {
			return rep, err
		}
	}
	// The blocks, the last reader, serve every read.
	return Reply{}, fmt.Errorf("%s/%s: no reader served the read at %d", h.obj.bucket, h.obj.key, off)
}

// Close releases the handle: its readers end in order (a spliced GET once
// a reply still being written has left its pipe, or given up to that
// reply's Done after Config.ReadTimeout; a stream once the blocks it
// claimed are in, as other readers may be waiting for them), and it leaves
// the version's readers. A second Close does nothing.
func (h *Handle) Close() {
	if h.closed.Swap(true) {
		return // closed already
	}
	h.st.closing(h)
	for _, r := range h.readers {
		r.close()
	}
	h.f.m.OpenHandles.Dec()
	h.f.leaveReaders(h)
}

// readState is what the open handles of one object version know of each
// other, and each one's place: which of its readers serves it now, and
// where its blocks read. It is the only state the readers share: a reader
// asks it (its methods, under its mu, which is never held across a call
// out of it) and never looks at another reader's fields, its handle's or
// another's.
//
// A handle's place starts with no holder. The spliced GET takes it at a
// read at 0 while no other handle of the version reads or splices
// (trySplice), and hands it to the blocks when it ends (spliceEnded): from
// where the reader is, as a sequential reader, after a failed GET or when
// another handle started reading (share), as the blocks would have served
// it; as a new reader otherwise. The blocks take it at their first read
// (startBlocks), which makes the handle a reader of the version: it
// counts in FS.readingHandles (the share of block memory each window
// gets) until it closes, and it makes the version's spliced GETs end at
// their next read (their bytes enter no block the two could share).
type readState struct {
	f      *FS
	mu     sync.Mutex
	places map[*Handle]*place
}

// place is one handle's entry in its version's readState.
type place struct {
	holder      holder
	spliceTried bool // a handle splices at most one whole-object GET
	// share: another handle of the version reads through blocks, so the
	// handle's spliced GET ends at its next read.
	share bool
	// streams: the handle has started stream feeds (Config.SpliceStreams);
	// streamShare: another handle of the version has read through blocks
	// since, so they end at their next read and no more start.
	streams, streamShare bool
	// reading: the blocks have served the handle; it counts in
	// FS.readingHandles.
	reading bool
	// handOver is where the blocks take over a sequential reader from the
	// spliced GET (valid while handedOver), for their first read.
	handOver   int64
	handedOver bool
	// closing: the handle is being closed, and counts as reading no more
	// (a loader that reads a file's header, closes it and maps it: the
	// mapping's read at 0 may come before the close has ended the first
	// open's spliced GET).
	closing bool
	// streak and nextOff are where the handle's blocks read: a sequential
	// reader reads at nextOff next (prefetcher.plan publishes them).
	streak  bool
	nextOff int64
}

// holder is which of a handle's readers holds its place.
type holder int

const (
	heldByNone   holder = iota // nothing read yet
	heldBySplice               // the spliced GET serves the handle's reads
	heldByBlocks               // the blocks do, from now on
)

// joinReaders enters h among its version's open handles.
func (f *FS) joinReaders(h *Handle) *readState {
	f.readersMu.Lock()
	defer f.readersMu.Unlock()
	st := f.readers[h.obj.id]
	if st == nil {
		st = &readState{f: f, places: make(map[*Handle]*place)}
		f.readers[h.obj.id] = st
	}
	st.mu.Lock()
	st.places[h] = &place{}
	st.mu.Unlock()
	return st
}

// leaveReaders takes h out of its version's open handles, and out of
// FS.readingHandles where it read.
func (f *FS) leaveReaders(h *Handle) {
	f.readersMu.Lock()
	defer f.readersMu.Unlock()
	st := h.st
	st.mu.Lock()
	if p := st.places[h]; p != nil && p.reading {
		f.readingHandles.Add(-1)
	}
	delete(st.places, h)
	empty := len(st.places) == 0
	st.mu.Unlock()
	if empty && f.readers[h.obj.id] == st {
		delete(f.readers, h.obj.id)
	}
}

// trySplice gives h's place to its spliced GET if h has read nothing yet,
// has not spliced before, and no other handle of the version reads or
// splices; the GET is then to be opened, and spliceEnded called when it
// ends (or could not start).
func (st *readState) trySplice(h *Handle) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.places[h]
	if p == nil || p.spliceTried || p.holder != heldByNone {
		return false
	}
	p.spliceTried = true
	if st.othersRead(h) {
		return false
	}
	p.holder = heldBySplice
	return true
}

// spliceUntried says whether h may still start the whole-object GET: it
// has not tried, holds no place, and no other handle of the version reads.
func (st *readState) spliceUntried(h *Handle) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.places[h]
	return p != nil && !p.spliceTried && p.holder == heldByNone && !st.othersRead(h)
}

// tryStreams says whether h may start a stream feed: no other handle of
// the version reads or splices, and none has read through blocks since h's
// first stream feed.
func (st *readState) tryStreams(h *Handle) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.places[h]
	if p == nil || p.streamShare || st.othersRead(h) {
		return false
	}
	p.streams = true
	return true
}

// closing notes that h is being closed: it no longer keeps the others
// from splicing.
func (st *readState) closing(h *Handle) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if p := st.places[h]; p != nil {
		p.closing = true
	}
}

// othersRead reports whether a handle of the version other than h, not
// being closed, reads through blocks or spliced GETs. Called with mu held.
func (st *readState) othersRead(h *Handle) bool {
	for o, op := range st.places {
		if o != h && !op.closing && (op.reading || op.holder == heldBySplice || op.streams) {
			return true
		}
	}
	return false
}

// spliceShared reports whether another handle of the version has started
// reading through blocks since h's spliced GET (ranged: its stream feeds)
// started: it is to end.
func (st *readState) spliceShared(h *Handle, ranged bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.places[h]
	return p != nil && (p.share && !ranged || p.streamShare && ranged)
}

// spliceEnded hands h's place from its spliced GET to the blocks; with
// sequential, they serve on from at as a sequential reader (unless they
// have served the handle already: no whole-object stream, as one GET of
// the object has been spent). Only the first call after trySplice counts.
func (st *readState) spliceEnded(h *Handle, at int64, sequential bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.places[h]
	if p == nil || p.holder != heldBySplice {
		return
	}
	p.holder, p.share = heldByBlocks, false
	if sequential && !p.reading {
		p.handOver, p.handedOver = at, true
	}
}

// startBlocks marks h as read through blocks. The first time it makes h a
// reader of the version (FS.readingHandles), makes the others' spliced
// GETs end at their next read, and returns where a spliced GET handed the
// reader over, if it did.
func (st *readState) startBlocks(h *Handle) (first bool, at int64, handedOver bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.places[h]
	if p == nil || p.reading {
		return false, 0, false
	}
	p.reading, p.holder = true, heldByBlocks
	st.f.readingHandles.Add(1)
	for o, op := range st.places {
		if o != h && op.holder == heldBySplice {
			op.share = true
		}
		if o != h && op.streams {
			op.streamShare = true
		}
	}
	at, handedOver = p.handOver, p.handedOver
	p.handedOver = false
	return true, at, handedOver
}

// moved publishes where h's blocks read: a sequential reader (streak)
// reads at nextOff next.
func (st *readState) moved(h *Handle, nextOff int64, streak bool) {
	st.mu.Lock()
	if p := st.places[h]; p != nil {
		p.nextOff, p.streak = nextOff, streak
	}
	st.mu.Unlock()
}

// hasOthers reports whether the version has open handles other than h.
func (st *readState) hasOthers() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.places) > 1
}

// readSoon reports whether a handle of the version other than h is a
// sequential reader that has not read all of [start, end) yet and will
// reach start within reach bytes: the largest window it may grow to, what
// it would prefetch itself. A handle that has not read yet is not one:
// programs open files long before they read them (or only for GPU reads),
// and blocks kept for them would be a cache by another name.
func (st *readState) readSoon(h *Handle, start, end, reach int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for o, p := range st.places {
		if o != h && p.streak && p.nextOff < end && start < p.nextOff+reach {
			return true
		}
	}
	return false
}
