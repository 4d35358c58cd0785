package rdmaread

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Single flight: GPU reads over HTTP of the same object version into the
// same device share one set of ranged GETs while their ranges overlap. A
// flight is one GET stream of a range [start, end) on its own context; each
// slot it fills is copied to every destination attached to it (one fill,
// several copies on the flight's stream, the slot fenced after the last).
// A read that comes while a flight is under way attaches at the flight's
// position, and the part already landed is copied device to device from a
// destination that has it, on the same stream and so after its bytes landed;
// with no such destination the read leads a flight of its own instead.
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
		w := e.join(key, r, ref, stager, pos, end, dst+uint64(pos-off))
		waits = append(waits, w)
		pos = w.t.b
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
// destination's import, which the flight puts when it ends.
func (e *Engine) join(key flightKey, r Request, ref cufile.Allocation, stager cufile.Stager, pos, end int64, dst uint64) joined {
	ft := &e.flights
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.m == nil {
		ft.m = map[flightKey][]*flight{}
	}
	newEnd := end
	for _, f := range ft.m[key] {
		if f.start > pos {
			newEnd = min(newEnd, f.start) // lead only up to the next flight
			continue
		}
		if pos >= f.end {
			continue
		}
		if t := f.attach(ref, pos, min(end, f.end), dst); t != nil {
			return joined{f, t}
		}
	}
	fctx, cancel := context.WithCancel(context.Background())
	f := &flight{key: key, version: r.Version, start: pos, end: newEnd, owner: r.Owner, ctx: fctx, cancel: cancel, pos: pos, ended: make(chan struct{})}
	t := &target{alloc: ref, a: pos, b: newEnd, dst: dst, done: make(chan struct{})}
	f.targets = []*target{t}
	ft.m[key] = append(ft.m[key], f)
	go e.runFlight(f, stager)
	return joined{f, t}
}

// attach adds a destination for [a, b) to a flight still running, or
// returns nil. Bytes the flight has already passed are copied device to
// device from a destination that holds them; without one it does not join.
func (f *flight) attach(ref cufile.Allocation, a, b int64, dst uint64) *target {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished || f.ctx.Err() != nil || len(f.targets) == 0 {
		return nil
	}
	if f.pos > a {
		have := min(f.pos, b)
		var src *target
		for _, s := range f.targets {
			if s.a <= a && s.b >= have {
				src = s
				break
			}
		}
		if src == nil || f.copier == nil {
			return nil
		}
		if err := f.copier.CopyDeviceAsync(src.alloc, src.dst+uint64(a-src.a), ref, dst, have-a); err != nil {
			return nil
		}
	}
	t := &target{alloc: ref, a: a, b: b, dst: dst, follower: true, done: make(chan struct{})}
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
	if copier != nil {
		t0 := time.Now()
		// Close synchronises the stream: every copy has landed once it returns.
		if cerr := copier.Close(); err == nil {
			err = cerr
		}
		e.m.GPUCopyWait.Add((time.Duration(copier.WaitNanos()) + time.Since(t0)).Seconds())
	}
	f.mu.Lock()
	if err == nil && f.pos != f.end {
		err = fmt.Errorf("rdmaread: %d of %d bytes carried", f.pos-f.start, f.end-f.start)
	}
	targets := append(f.targets, f.gone...)
	for _, t := range f.targets {
		t.err = err
		close(t.done)
	}
	f.targets, f.gone = nil, nil
	f.mu.Unlock()
	f.cancel()
	for _, t := range targets {
		if perr := e.imports.Put(t.alloc); perr != nil {
			e.log.Warn("putting a shared read's import", "err", perr)
		}
	}
	close(f.ended)
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
			slot, err := e.acquireSlot(f.ctx, copier)
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
