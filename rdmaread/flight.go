package rdmaread

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Single flight: GPU reads over HTTP of the same object version into the
// same device share one set of ranged GETs while their ranges overlap. A
// flight is one GET stream of a range [start, end) on its own context; each
// slot it fills is copied to every destination attached to it (one fill,
// several copies on the flight's stream): once over the host link into a
// device buffer of the daemon's, and from there to each destination
// (cufile/staging's twins), so that destinations on one GPU do not share
// the link's rate. Bytes reach a destination only from the daemon's own
// memory, never from another caller's buffer, which that caller may change
// at any time.
//
// A read that comes while a flight is under way attaches at the flight's
// position: it gets every slot the flight fills from there on. The part the
// flight had already passed is fetched again for it, by a flight of its own
// over just that part (which later reads may join in turn), so a late joiner
// costs the server what it missed and no more. A copy that fails is the
// failure of the destination it was for alone (cufile.CopyError); the
// flight's GET failing fails every destination.
//
// What may share is one version of one object (the key below: a version's
// ETag, or its size and time when there is none), and only at the same
// object offsets: a slot holding object bytes [p, p+n) goes to each
// destination's place for those bytes.
//
// The flight lives while any destination waits: the read that started it is
// a destination like the others, and its cancellation detaches it only. The
// flight holds its own reference on every destination's import until its
// stream is synchronised, so no copy lands in an unmapped allocation.

// flightKey names what flights may share: one version of one object, on
// one device.
type flightKey struct {
	bucket, key string
	version     string // objstore.Version.ID
	size        int64
	device      int
}

type flightTable struct {
	mu sync.Mutex
	m  map[flightKey][]*flight
}

type flight struct {
	key        flightKey
	version    objstore.Version
	start, end int64
	owner      int // whose turn in the scheduler it runs on
	ctx        context.Context
	cancel     context.CancelFunc

	mu       sync.Mutex
	pos      int64 // object offset up to which copies are enqueued to every target
	copier   cufile.Copier
	targets  []*target // attached
	gone     []*target // detached or failed; their imports are put at the end
	finished bool
	syncs    sync.WaitGroup // detached destinations draining the stream
	ended    chan struct{}  // closed once the stream is synchronised and the flight is over
}

// target is one destination of a flight: object bytes [a, b) land at dst.
type target struct {
	alloc    cufile.Allocation // the flight's own reference on the import
	a, b     int64
	dst      uint64
	follower bool // the bytes come from a fetch another read started
	done     chan struct{}
	err      error // set before done is closed
}

type joined struct {
	f *flight
	t *target
}

// flightPart delivers [off, off+size) of r into alloc at dst through
// flights, joining those in flight and leading new ones for the rest. It
// returns how many of the bytes came from fetches other reads led.
func (e *Engine) flightPart(ctx context.Context, r Request, alloc cufile.Allocation, stager cufile.Stager, off, size int64, dst uint64) (int64, error) {
	key := flightKey{bucket: r.Bucket, key: r.Key, version: r.Version.ID(), size: r.Version.Size, device: r.Device}
	var waits []joined
	detachAll := func(ws []joined) {
		for _, w := range ws {
			w.f.detach(w.t)
		}
	}
	defer func() {
		// Whatever happened, no copy into this destination is still on its
		// way when the read returns: the caller may reuse the buffer.
		for _, w := range waits {
			w.f.quiesce()
		}
	}()
	for pos, end := off, off+size; pos < end; {
		ref, err := e.imports.AcquireAs(r.Owner, r.UID, r.Device, r.Handle)
		if err != nil {
			detachAll(waits)
			return 0, err
		}
		ws := e.join(key, r, ref, stager, pos, end, dst+uint64(pos-off))
		waits = append(waits, ws...)
		pos = ws[len(ws)-1].t.b
	}
	var shared int64
	for i, w := range waits {
		select {
		case <-w.t.done:
		case <-ctx.Done():
			detachAll(waits[i:])
			return shared, ctx.Err()
		}
		if w.t.err != nil {
			detachAll(waits[i+1:])
			return shared, w.t.err
		}
		if w.t.follower {
			shared += w.t.b - w.t.a
		}
	}
	return shared, nil
}

// join attaches a destination for object bytes from pos (up to end) to a
// flight under way, or starts one; ref is the flight's reference on the
// destination's import, which the flight puts when it ends. Joining a
// flight that has passed pos, it also leads a flight over the part passed:
// it returns that one first, then the one joined.
func (e *Engine) join(key flightKey, r Request, ref cufile.Allocation, stager cufile.Stager, pos, end int64, dst uint64) []joined {
	ft := &e.flights
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.m == nil {
		ft.m = map[flightKey][]*flight{}
	}
	newEnd := end
	var under []*flight // flights over pos
	for _, f := range ft.m[key] {
		if f.start > pos {
			newEnd = min(newEnd, f.start) // lead only up to the next flight
			continue
		}
		if pos >= f.end {
			continue
		}
		under = append(under, f)
	}
	if len(under) > 0 {
		// A second reference for a part led beside the one joined: the
		// import is in the cache, held by ref, so this is a lookup.
		extra, err := e.imports.Acquire(r.Owner, r.Device, r.Handle)
		if err == nil {
			// The flight that has passed pos by the fewest bytes first:
			// what it has passed is fetched again.
			slices.SortStableFunc(under, func(x, y *flight) int { return cmp.Compare(x.position(), y.position()) })
			for _, f := range under {
				t := f.attach(ref, pos, min(end, f.end), newEnd, dst)
				if t == nil {
					continue
				}
				if t.a == pos {
					e.putRef(extra)
					return []joined{{f, t}}
				}
				return []joined{e.leadLocked(key, r, extra, stager, pos, t.a, dst), {f, t}}
			}
			e.putRef(extra)
		}
	}
	return []joined{e.leadLocked(key, r, ref, stager, pos, newEnd, dst)}
}

// leadLocked starts a flight over [a, b) with one destination, at dst;
// the flight table is locked.
func (e *Engine) leadLocked(key flightKey, r Request, ref cufile.Allocation, stager cufile.Stager, a, b int64, dst uint64) joined {
	ft := &e.flights
	fctx, cancel := context.WithCancel(context.Background())
	f := &flight{key: key, version: r.Version, start: a, end: b, owner: r.Owner, ctx: fctx, cancel: cancel, pos: a, ended: make(chan struct{})}
	t := &target{alloc: ref, a: a, b: b, dst: dst, done: make(chan struct{})}
	f.targets = []*target{t}
	ft.m[key] = append(ft.m[key], f)
	go e.runFlight(f, stager)
	return joined{f, t}
}

func (e *Engine) putRef(ref cufile.Allocation) {
	if err := e.imports.Put(ref); err != nil {
		e.log.Warn("putting a shared read's import", "err", err)
	}
}

func (f *flight) position() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pos
}

// attach adds a destination for object bytes [a, b) at dst to a flight
// still running, from the flight's position on when it has passed a (the
// returned target's a says from where), or returns nil: when the flight is
// over, has passed b, or has passed limit, which the part it passed, to be
// led apart, may not run beyond.
func (f *flight) attach(ref cufile.Allocation, a, b, limit int64, dst uint64) *target {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished || f.ctx.Err() != nil || len(f.targets) == 0 {
		return nil
	}
	// Every slot the flight fills from here on starts at f.pos or later
	// (deliver moves f.pos under this lock), so the target misses none.
	from := max(a, f.pos)
	if from >= b || from > limit {
		return nil
	}
	t := &target{alloc: ref, a: from, b: b, dst: dst + uint64(from-a), follower: true, done: make(chan struct{})}
	f.targets = append(f.targets, t)
	return t
}

// detach takes a destination whose caller gave up off the flight; the last
// one to go ends the flight.
func (f *flight) detach(t *target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropLocked(t)
}

// quiesce returns once every copy the flight has enqueued so far has
// landed: a destination that left the flight gets nothing after it.
func (f *flight) quiesce() {
	f.mu.Lock()
	if f.finished {
		f.mu.Unlock()
		<-f.ended
		return
	}
	cp := f.copier
	f.syncs.Add(1)
	f.mu.Unlock()
	defer f.syncs.Done()
	if cp != nil {
		cp.Drain() // a failure is the flight's to report
	}
}

func (f *flight) dropLocked(t *target) {
	for i, x := range f.targets {
		if x == t {
			f.targets = append(f.targets[:i], f.targets[i+1:]...)
			f.gone = append(f.gone, t)
			break
		}
	}
	if len(f.targets) == 0 {
		f.cancel()
	}
}

// runFlight fetches the flight's range and ends it: every destination
// still attached learns the outcome once the flight's stream is
// synchronised, and the flight's import references are put.
func (e *Engine) runFlight(f *flight, stager cufile.Stager) {
	var copier cufile.Copier
	err := func() error {
		done, err := e.sched.Acquire(f.ctx, f.owner, min(f.end-f.start, int64(e.cfg.Staging.SlotSize)))
		if err != nil {
			return err
		}
		defer done()
		if copier, err = stager.NewCopier(); err != nil {
			return err
		}
		f.mu.Lock()
		f.copier = copier
		f.mu.Unlock()
		return e.streamFlight(f, copier)
	}()

	f.mu.Lock()
	f.finished = true
	f.mu.Unlock()
	ft := &e.flights
	ft.mu.Lock()
	list := ft.m[f.key]
	for i, x := range list {
		if x == f {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(ft.m, f.key)
	} else {
		ft.m[f.key] = list
	}
	ft.mu.Unlock()

	f.syncs.Wait() // no Drain runs beside Close
	var copyErr error
	if copier != nil {
		// Close synchronises the stream: every copy has landed once it
		// returns. Its wait is in WaitNanos.
		copyErr = copier.Close()
		e.m.GPUCopyWait.Add(time.Duration(copier.WaitNanos()).Seconds())
	}
	f.mu.Lock()
	if err == nil && f.pos != f.end {
		err = fmt.Errorf("rdmaread: %d of %d bytes carried", f.pos-f.start, f.end-f.start)
	}
	targets := append(f.targets, f.gone...)
	for _, t := range f.targets {
		t.err = err
		if err == nil {
			t.err = copyErrFor(copyErr, t.alloc)
		}
		close(t.done)
	}
	f.targets, f.gone = nil, nil
	f.mu.Unlock()
	f.cancel()
	for _, t := range targets {
		e.putRef(t.alloc)
	}
	close(f.ended)
}

// copyErrFor is the part of err, what the flight's copier reported, that
// is dst's: a copy into another destination that failed is that
// destination's failure alone; a failure the device reported for the
// stream as a whole is everyone's.
func copyErrFor(err error, dst cufile.Allocation) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var mine []error
	for _, e := range errs {
		var ce *cufile.CopyError
		if errors.As(e, &ce) && ce.Dst != dst {
			continue
		}
		if e != nil {
			mine = append(mine, e)
		}
	}
	if len(mine) == 1 {
		return mine[0]
	}
	return errors.Join(mine...)
}

// streamFlight is streamPart for a flight: the range is read with one
// ranged GET (on a connection of its own where the engine's GETs are) into
// successive slots, each copied to every destination attached at that
// moment; after a transient failure the Getter asks again from the first
// byte not yet in a slot.
func (e *Engine) streamFlight(f *flight, copier cufile.Copier) error {
	f.mu.Lock()
	pos := f.pos
	f.mu.Unlock()
	if pos >= f.end {
		return nil
	}
	rng := objstore.Range{Bucket: f.key.bucket, Key: f.key.key, Off: pos, N: f.end - pos, Version: f.version}
	return e.gets.Fetch(f.ctx, rng, e.raw, nil, func(body *objstore.Body, pos int64) (int64, error) {
		start := pos
		for pos < f.end {
			slot, err := e.acquireSlot(f.ctx, copier, f.key.device)
			if err != nil {
				return pos - start, err
			}
			n := min(int64(len(slot.Buf)), f.end-pos)
			if err := body.ReadFull(slot.Buf[:n]); err != nil {
				copier.ReleaseSlot(slot) // these bytes are asked for again
				return pos - start, err
			}
			e.m.GPUFetchedBytes.Add(float64(n))
			f.deliver(copier, slot, pos, n)
			pos += n
		}
		return pos - start, nil
	})
}

// deliver copies the slot holding object bytes [pos, pos+n) to every
// attached destination; one whose copy is refused fails alone.
func (f *flight) deliver(copier cufile.Copier, slot *cufile.Slot, pos, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var pieces []cufile.SlotCopy
	var to []*target
	for _, t := range f.targets {
		lo, hi := max(pos, t.a), min(pos+n, t.b)
		if lo >= hi {
			continue
		}
		pieces = append(pieces, cufile.SlotCopy{Off: int(lo - pos), N: int(hi - lo), Dst: t.alloc, DstOff: t.dst + uint64(lo-t.a)})
		to = append(to, t)
	}
	errs := copier.CopyAsyncMany(slot, pieces)
	for i, err := range errs {
		if err != nil {
			t := to[i]
			t.err = err
			close(t.done)
			f.dropLocked(t)
		}
	}
	f.pos = pos + n
}
