package rdmaread

// GPU readahead: one open file's GPU reads in order are read ahead into
// pinned staging the daemon owns.
//
// What is read ahead. Each open file (a handle the callers' layer keeps,
// Request.Ahead) remembers where its last GPU read ended and on which
// device. A read that starts there, on the same device and object version,
// is in order: besides serving it, the engine fetches the range after it
// (up to the window) with ranged GETs into slots of that device's staging
// ring, which the readahead holds, filled, until a read asks for their
// bytes. A read that finds its range, or a prefix of it, in those slots
// costs only the device copies from them (CopyHeldAsync), waiting for a GET
// under way to fill the slots it needs; the rest is fetched as any read's
// is (readHTTP). Bytes reach a caller's buffer only from the daemon's own
// slots, never from another caller's buffer, and every GET is pinned to the
// version the file opened, so readahead never serves bytes of another
// version.
//
// When the window grows. The first read in order opens a window of its own
// size (at least a slot); each further read in order doubles it, up to
// Config.ReadAhead (--gpu-read-ahead, 512 MiB by default). After each read
// in order the range ahead is topped up to the window once a quarter of it
// (or a read's worth) has been consumed, so that GETs are large: the gap is
// cut into GETs of the window over aheadGETs (aheadPart, between minPart
// and aheadPartMax), fetched in offset order, all of the window's at once,
// each taking its turn in the scheduler like any GET. A whole window is
// thus aheadGETs GETs in flight while the reader copies from what has
// landed: as many as one object on a server needs to reach its rate
// (docs/benchmarks.md), whatever Streams, which cuts single reads, says.
//
// Which reads are in order. One that starts where the last one ended, or,
// since a reader's threads taking tasks in turn send them a little out of
// order, one that falls in what readahead holds or fetches, or ahead of
// the last within the window (nearLocked); where the last read ended then
// moves only forward.
//
// What drops it. A read elsewhere (a seek, another device or version), the file's close, its process's exit (the callers'
// reaper), a read that fails (ESTALE among others), a readahead GET that
// fails (it is cut where it stopped, and dropped whole on ESTALE), and
// staging pressure: a read that finds no free slot in the ring makes every
// readahead on that device give its slots back before it waits, and a
// readahead GET takes slots only when they are free (TryAcquireSlot), never
// queueing before a read. Dropping cancels the GETs and gives the slots back
// to the ring, once no read is copying from them.
//
// What bounds it. Per file, the window; per device, half the staging ring
// (Staging.Slots/2 slots, by default 128 x 4 MiB = 512 MiB): a file's
// top-up reserves its slots from that share first and reads ahead only as
// far as the reservation goes, and no file reserves more than the share
// over the files reading ahead on the device (a file alone takes all of
// it; one that took more before others came keeps it until it is read).
//
// Counted in s3gdsfs_gpu_read_ahead_bytes_total (fetched ahead),
// s3gdsfs_gpu_read_ahead_served_bytes_total (delivered from it) and
// s3gdsfs_gpu_read_ahead_dropped_bytes_total (fetched ahead and given back
// unread); bytes served from readahead count as HTTP bytes of the read, as
// they travelled.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// DefaultReadAhead is the largest window of one file's GPU readahead where
// a mount sets none: enough GETs of aheadPartMax in flight for a lone
// reader to reach one object's rate, and no more than the device's share
// of the default ring.
const DefaultReadAhead = 512 << 20

// aheadGETs is how many GETs a window is cut into, and aheadPartMax the
// largest of them: a server answers few large ranges more cheaply than
// many small ones, yet one object needs about this many in flight to reach
// the server's rate (docs/benchmarks.md).
const (
	aheadGETs    = 16
	aheadPartMax = 32 << 20
)

// errNoSlot ends a readahead GET that found no free slot: the ring is
// wanted by reads.
var errNoSlot = errors.New("rdmaread: no free staging slot to read ahead into")

// Ahead is the GPU readahead state of one open file. The zero value is not
// usable: make one with NewAhead. Its methods are safe for concurrent use.
type Ahead struct {
	mu      sync.Mutex
	e       *Engine
	dev     *aheadDevice // the device's share it reserved slots from; nil while none
	stager  cufile.Stager
	device  int
	object  aheadObject
	version objstore.Version
	owner   int
	// next is where a read in order starts; -1 before the first read.
	next   int64
	window int64
	// readLen is the last read's length: a top-up fetches at least that.
	readLen int64
	// end is where what segs cover ends; consumed is where the bytes reads
	// in order took from the slots end.
	end, consumed int64
	// [earlyFrom, earlyTo) is what reads that came ahead of consumed (a
	// task before the one still due) took from the slots: consumed jumps
	// past it once a read reaches it, and the slots before it stay for
	// the read still due. earlyTo 0: none.
	earlyFrom, earlyTo int64
	segs               []*segment // in offset order, contiguous, from the oldest kept
	changed            chan struct{}
	closed             bool
}

type aheadObject struct {
	bucket, key, version string
	size                 int64
}

// segment is one readahead GET: object bytes [a, b) into slots, slot i
// holding [a+i*slotSize, ...).
type segment struct {
	a, b   int64
	owner  int
	dev    *aheadDevice
	stager cufile.Stager
	size   int64 // the ring's slot size
	rng    objstore.Range
	ctx    context.Context
	cancel context.CancelFunc
	slots  []*cufile.Slot // nil once given back
	refs   []int          // reads copying from each slot
	filled int64          // [a, filled) is in slots
	// reserved is how many slots of the device's share it took; those
	// never filled are handed back when the fetch ends.
	reserved         int
	started, done    bool
	dropped          bool
	fetchEndReported bool
}

// NewAhead is the readahead state of a file that has not been read yet.
func NewAhead() *Ahead { return &Ahead{next: -1, changed: make(chan struct{})} }

// aheadDevice is one device's share of its ring for readahead.
type aheadDevice struct {
	mu     sync.Mutex
	limit  int // slots
	used   int // reserved or held
	aheads map[*Ahead]struct{}
	// held is what each file reserved or holds, files holding none left
	// out: a file takes no more than its part of the share (fairLocked).
	held map[*Ahead]int
}

// reserve takes up to want slots of the share for a, none unless least
// are free, and no more than a's fair part of the share.
func (d *aheadDevice) reserve(a *Ahead, want, least int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	fair := d.fairLocked(a)
	// A fair part smaller than a quarter of the window still reads ahead,
	// in steps of a quarter of that part.
	least = min(least, max(fair/4, 1))
	k := min(want, d.limit-d.used, fair-d.held[a])
	if k <= 0 || k < least {
		return 0
	}
	d.used += k
	d.held[a] += k
	d.aheads[a] = struct{}{}
	return k
}

// fairLocked is a's part of the share: the share over the files reading
// ahead on the device, a among them. One file alone may take all of it;
// a second in-order reader on the device is not left to read without
// readahead while the first holds the share (a file over its part keeps
// what it holds and takes no more until it is back under).
func (d *aheadDevice) fairLocked(a *Ahead) int {
	n := len(d.held)
	if d.held[a] == 0 {
		n++
	}
	return max(d.limit/n, 1)
}

func (d *aheadDevice) give(a *Ahead, k int) {
	if k == 0 {
		return
	}
	d.mu.Lock()
	d.used -= k
	if d.held[a] -= k; d.held[a] <= 0 {
		delete(d.held, a)
	}
	d.mu.Unlock()
}

func (d *aheadDevice) forget(a *Ahead) {
	d.mu.Lock()
	delete(d.aheads, a)
	d.mu.Unlock()
}

func (d *aheadDevice) holding() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used > 0
}

// aheadMetrics are the readahead's counters, registered by the engine.
type aheadMetrics struct {
	fetched, served, dropped prometheus.Counter
}

func newAheadMetrics(reg prometheus.Registerer, slots func() float64) aheadMetrics {
	m := aheadMetrics{
		fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "s3gdsfs_gpu_read_ahead_bytes_total", Help: "Bytes GPU readahead fetched into pinned staging ahead of reads in order.",
		}),
		served: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "s3gdsfs_gpu_read_ahead_served_bytes_total", Help: "Bytes GPU reads placed in device memory from readahead slots (part of the http transport's bytes).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "s3gdsfs_gpu_read_ahead_dropped_bytes_total", Help: "Bytes GPU readahead fetched and gave back unread (seek, close, failure, staging pressure).",
		}),
	}
	reg.MustRegister(m.fetched, m.served, m.dropped, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "s3gdsfs_gpu_read_ahead_slots", Help: "Staging slots reserved or held by GPU readahead, every GPU together.",
	}, slots))
	return m
}

// aheadDev is the device's share, made on first use.
func (e *Engine) aheadDev(device int) *aheadDevice {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.aheadDevs[device]
	if !ok {
		d = &aheadDevice{limit: max(1, e.cfg.Staging.Slots/2), aheads: map[*Ahead]struct{}{}, held: map[*Ahead]int{}}
		e.aheadDevs[device] = d
	}
	return d
}

// aheadSlots sums the slots readahead reserved or holds.
func (e *Engine) aheadSlots() float64 {
	e.mu.Lock()
	devs := make([]*aheadDevice, 0, len(e.aheadDevs))
	for _, d := range e.aheadDevs {
		devs = append(devs, d)
	}
	e.mu.Unlock()
	n := 0
	for _, d := range devs {
		d.mu.Lock()
		n += d.used
		d.mu.Unlock()
	}
	return float64(n)
}

// pressure makes every readahead on device give its slots back: a read
// found none free.
func (e *Engine) pressure(device int) {
	if n := e.dropDevice(device); n > 0 {
		e.log.Debug("GPU readahead dropped: a read found no free staging slot", "device", device, "files", n)
	}
}

// dropDevice drops every readahead on device and says how many there were.
func (e *Engine) dropDevice(device int) int {
	d := e.aheadDev(device)
	d.mu.Lock()
	aheads := make([]*Ahead, 0, len(d.aheads))
	for a := range d.aheads {
		aheads = append(aheads, a)
	}
	d.mu.Unlock()
	for _, a := range aheads {
		a.Drop()
	}
	return len(aheads)
}

// dropAllAhead drops every readahead and waits for their GETs to end.
func (e *Engine) dropAllAhead() {
	e.mu.Lock()
	devs := make([]int, 0, len(e.aheadDevs))
	for d := range e.aheadDevs {
		devs = append(devs, d)
	}
	e.mu.Unlock()
	for _, d := range devs {
		e.dropDevice(d)
	}
	e.aheadGets.Wait()
}

// Drop gives back what the file read ahead: its GETs are cancelled and its
// slots return to the ring once no read copies from them. A later read in
// order starts over with a small window.
func (a *Ahead) Drop() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropLocked()
}

// Close drops the readahead for good: the file is closed.
func (a *Ahead) Close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.dropLocked()
}

func (a *Ahead) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *Ahead) dropLocked() {
	for _, s := range a.segs {
		a.dropSegLocked(s)
	}
	a.segs = nil
	a.window = 0
	a.end = max(a.next, 0)
	a.earlyFrom, a.earlyTo = 0, 0
	if a.dev != nil {
		a.dev.forget(a)
	}
	a.notifyLocked()
}

// dropSegLocked cancels a segment and gives back the slots no read copies
// from; the others go when their reads are done, the unfilled reservation
// when its fetch ends.
func (a *Ahead) dropSegLocked(s *segment) {
	s.dropped = true
	s.cancel()
	if !s.started {
		s.done = true
	}
	a.sweepLocked(s)
}

// sweepLocked gives back s's slots that no read copies from and that are
// consumed or dropped, and, once its fetch has ended, the slots it
// reserved and never filled.
func (a *Ahead) sweepLocked(s *segment) {
	size := s.size
	for i, slot := range s.slots {
		if slot == nil || s.refs[i] > 0 {
			continue
		}
		lo, hi := s.a+int64(i)*size, min(s.a+int64(i+1)*size, s.filled)
		if !s.dropped && hi > a.consumed {
			continue
		}
		if unread := hi - max(lo, a.consumed); unread > 0 {
			a.e.aheadM.dropped.Add(float64(unread))
		}
		s.stager.ReleaseSlot(slot)
		s.slots[i] = nil
		s.dev.give(a, 1)
	}
	if s.done && !s.fetchEndReported {
		s.fetchEndReported = true
		s.dev.give(a, s.reserved-len(s.slots))
	}
}

// spent says whether a segment holds nothing and fetches nothing.
func (s *segment) spent() bool {
	if !s.done {
		return false
	}
	for _, slot := range s.slots {
		if slot != nil {
			return false
		}
	}
	return true
}

// begin notes a read of n bytes at r.Offset and, when it is in order, grows
// the window and tops up the range ahead. It returns whether the read may
// find bytes in slots.
func (a *Ahead) begin(e *Engine, r Request, n int64, stager cufile.Stager) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	if a.e == nil {
		a.e = e
	}
	obj := aheadObject{bucket: r.Bucket, key: r.Key, version: r.Version.ID(), size: r.Version.Size}
	same := a.next >= 0 && a.device == r.Device && a.object == obj
	inOrder := same && (a.next == r.Offset || a.nearLocked(r.Offset))
	if !inOrder {
		a.dropLocked() // a seek, another device or version
	}
	if a.dev == nil || a.device != r.Device {
		a.dev = e.aheadDev(r.Device)
	}
	a.device, a.object, a.version, a.stager, a.owner = r.Device, obj, r.Version, stager, r.Owner
	if inOrder {
		a.next = max(a.next, r.Offset+n) // a task that came early or late moves nothing back
	} else {
		a.next = r.Offset + n
	}
	if len(a.segs) == 0 {
		// Nothing kept: what is read ahead starts after this read.
		a.end, a.consumed = a.next, a.next
	}
	if !inOrder {
		return false
	}
	slot := int64(e.cfg.Staging.SlotSize)
	if a.window == 0 {
		a.window = min(max(n, slot), e.cfg.ReadAhead)
	} else {
		a.window = min(2*a.window, e.cfg.ReadAhead)
	}
	a.end = max(a.end, a.next)
	a.readLen = n
	a.topUpLocked()
	return len(a.segs) > 0
}

// tookLocked notes that a read took [from, to) from the slots. One that
// starts at or before consumed moves it on, past what reads that came early
// took if it now reaches them; one past consumed is a task that came early.
func (a *Ahead) tookLocked(from, to int64) {
	if from > a.consumed {
		if a.earlyTo == 0 || from > a.earlyTo || to < a.earlyFrom {
			a.earlyFrom, a.earlyTo = from, to // a new run (an older one is swept once consumed passes it)
		} else {
			a.earlyFrom, a.earlyTo = min(a.earlyFrom, from), max(a.earlyTo, to)
		}
		return
	}
	a.consumed = max(a.consumed, to)
	if a.earlyTo != 0 && a.earlyFrom <= a.consumed {
		a.consumed = max(a.consumed, a.earlyTo)
		a.earlyFrom, a.earlyTo = 0, 0
	}
}

// nearLocked reports whether a read at off that does not start where the
// last one ended still belongs to the file's reads in order: it falls in
// what readahead holds or is fetching, or ahead of the last read within
// the window. A reader's threads taking tasks in turn (kvikio's pool) send
// them a little out of order; dropping what was fetched at each would
// leave them a GET per read.
func (a *Ahead) nearLocked(off int64) bool {
	if a.window > 0 && off > a.next && off < a.next+a.window {
		return true
	}
	return a.segAtLocked(off) != nil
}

// topUp tops up the range ahead after a read has given its slots back.
func (a *Ahead) topUp() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed && a.window > 0 {
		a.topUpLocked()
	}
}

// topUpLocked adds segments from a.end up to the window past the last
// read, once the gap is worth GETs of a good size (a quarter of the window
// or a read's worth, or the rest of the object), as far as the device's
// share allows, and starts their fetches.
func (a *Ahead) topUpLocked() {
	e := a.e
	target := min(a.next+a.window, a.object.size)
	gap := target - a.end
	least := min(max(a.window/4, a.readLen), a.object.size-a.end)
	if gap <= 0 || gap < least {
		return
	}
	slot := int64(e.cfg.Staging.SlotSize)
	part := e.aheadPart(a.window)
	for stop := a.end + gap; a.end < stop; {
		size := min(part, stop-a.end)
		want := int((size + slot - 1) / slot)
		got := a.dev.reserve(a, want, int((min(least, size)+slot-1)/slot))
		if got == 0 {
			break
		}
		if got < want {
			size = int64(got) * slot
		}
		ctx, cancel := context.WithCancel(context.Background())
		a.segs = append(a.segs, &segment{a: a.end, b: a.end + size, owner: a.owner, dev: a.dev, stager: a.stager, size: slot,
			ctx: ctx, cancel: cancel, filled: a.end, reserved: got,
			rng: objstore.Range{Bucket: a.object.bucket, Key: a.object.key, Off: a.end, N: size, Version: a.version}})
		a.end += size
		if got < want {
			break
		}
	}
	a.pumpLocked()
}

// aheadPart is the range of one readahead GET for a window: the window
// over aheadGETs, none under minPart, none over aheadPartMax nor PartSize
// when that is set.
func (e *Engine) aheadPart(window int64) int64 {
	const align = 1 << 20
	part := min(max(window/aheadGETs, minPart), aheadPartMax)
	part = (part + align - 1) / align * align
	if e.cfg.PartSize > 0 {
		part = min(part, e.cfg.PartSize)
	}
	return part
}

// pumpLocked starts the next segments' fetches, in offset order: every
// segment of the window at once (the window bounds how many there are).
func (a *Ahead) pumpLocked() {
	for _, s := range a.segs {
		if s.started || s.dropped {
			continue
		}
		s.started = true
		a.e.aheadGets.Add(1)
		go a.fetch(a.e, s)
	}
}

// fetch runs one segment's GET into slots it takes only when they are free.
func (a *Ahead) fetch(e *Engine, s *segment) {
	defer e.aheadGets.Done()
	stager := s.stager
	err := func() error {
		done, err := e.sched.Acquire(s.ctx, s.owner, int64(e.cfg.Staging.SlotSize))
		if err != nil {
			return err
		}
		defer done()
		// A slot before the GET: with none free, no request is sent.
		first := stager.TryAcquireSlot()
		if first == nil {
			return errNoSlot
		}
		defer func() {
			if first != nil {
				stager.ReleaseSlot(first)
			}
		}()
		var short error
		err = e.gets.Fetch(s.ctx, s.rng, e.raw, nil, func(body *objstore.Body, pos int64) (int64, error) {
			start := pos
			for pos < s.b {
				slot := first
				first = nil
				if slot == nil {
					if slot = stager.TryAcquireSlot(); slot == nil {
						// Not retried: the Getter stops once the context ends.
						short = errNoSlot
						s.cancel()
						return pos - start, errNoSlot
					}
				}
				k := min(int64(len(slot.Buf)), s.b-pos)
				if err := body.ReadFull(slot.Buf[:k]); err != nil {
					stager.ReleaseSlot(slot) // these bytes are asked for again
					return pos - start, err
				}
				e.m.GPUFetchedBytes.Add(float64(k))
				e.aheadM.fetched.Add(float64(k))
				if !a.filled(s, slot, pos+k) {
					return pos - start, context.Canceled
				}
				pos += k
			}
			return pos - start, nil
		})
		if short != nil {
			return short
		}
		return err
	}()
	a.fetched(s, err)
}

// filled adds a slot holding bytes up to to; false, the slot given back,
// when the segment was dropped meanwhile.
func (a *Ahead) filled(s *segment, slot *cufile.Slot, to int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.dropped {
		s.stager.ReleaseSlot(slot)
		return false
	}
	s.slots = append(s.slots, slot)
	s.refs = append(s.refs, 0)
	s.filled = to
	a.notifyLocked()
	return true
}

// fetched ends a segment's fetch. One that stopped short is cut where it
// stopped and the segments after it dropped, so that the slots always hold
// one run of the object; an object that changed drops everything.
func (a *Ahead) fetched(s *segment, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.done = true
	if err != nil && !s.dropped {
		a.e.log.Debug("GPU readahead cut short", "bucket", a.object.bucket, "key", a.object.key,
			"offset", s.filled, "err", err)
		switch {
		case errors.Is(err, objstore.ErrChanged):
			a.dropLocked()
		default:
			s.b = s.filled
			for i, x := range a.segs {
				if x == s {
					for _, later := range a.segs[i+1:] {
						a.dropSegLocked(later)
					}
					a.segs = a.segs[:i+1]
					break
				}
			}
			a.end = s.b
			a.window = 0
		}
	}
	a.sweepLocked(s)
	a.trimLocked()
	if !a.closed {
		a.pumpLocked()
	}
	a.notifyLocked()
}

// trimLocked forgets the oldest segments once they hold nothing.
func (a *Ahead) trimLocked() {
	k := 0
	for k < len(a.segs) && a.segs[k].spent() && a.segs[k].b <= a.consumed {
		k++
	}
	a.segs = a.segs[k:]
}

// segAtLocked is the segment kept over object offset pos, or nil.
func (a *Ahead) segAtLocked(pos int64) *segment {
	for _, s := range a.segs {
		if s.a <= pos && pos < s.b && !s.dropped {
			return s
		}
	}
	return nil
}

// serve copies the longest prefix of [r.Offset, r.Offset+n) that readahead
// holds or is fetching into alloc, waiting for slots a GET under way is
// filling. It returns how many bytes it delivered (all landed once it
// returns) and the time spent waiting on copies.
func (a *Ahead) serve(ctx context.Context, r Request, n int64, alloc cufile.Allocation) (int64, time.Duration, error) {
	type ref struct {
		s *segment
		i int
	}
	var refs []ref
	var copier cufile.Copier
	var err error
	pos, end := r.Offset, r.Offset+n
	a.mu.Lock()
	slotSize := int64(a.e.cfg.Staging.SlotSize)
	stager := a.stager
loop:
	for pos < end {
		s := a.segAtLocked(pos)
		if s == nil {
			break
		}
		i := int((pos - s.a) / slotSize)
		for i >= len(s.slots) && !s.done && !s.dropped {
			ch := a.changed
			a.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
			}
			a.mu.Lock()
			if err = ctx.Err(); err != nil {
				break loop
			}
		}
		if s.dropped || i >= len(s.slots) || s.slots[i] == nil {
			break
		}
		if copier == nil {
			if copier, err = stager.NewCopier(); err != nil {
				break
			}
		}
		lo := s.a + int64(i)*slotSize
		k := min(lo+slotSize, s.filled, end) - pos
		slot := s.slots[i]
		s.refs[i]++ // the slot stays filled while this read copies from it
		refs = append(refs, ref{s, i})
		a.mu.Unlock()
		err = copier.CopyHeldAsync(slot, int(pos-lo), int(k), alloc, r.DstOffset+uint64(pos-r.Offset))
		a.mu.Lock()
		if err != nil {
			break
		}
		pos += k
	}
	a.mu.Unlock()
	var wait time.Duration
	if copier != nil {
		// Close synchronises the stream: the bytes have landed once it
		// returns, and the slots may go back. Its wait is in WaitNanos.
		if cerr := copier.Close(); err == nil {
			err = cerr
		}
		wait = time.Duration(copier.WaitNanos())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, rf := range refs {
		rf.s.refs[rf.i]--
	}
	if err == nil {
		a.tookLocked(r.Offset, pos)
	} else {
		pos = r.Offset
	}
	for i, rf := range refs {
		if i == 0 || rf.s != refs[i-1].s {
			a.sweepLocked(rf.s)
		}
	}
	for _, s := range a.segs {
		if s.b > a.consumed {
			break
		}
		a.sweepLocked(s)
	}
	a.trimLocked()
	return pos - r.Offset, wait, err
}

// readAhead serves a read of n bytes through the file's readahead: what it
// holds is copied from its slots, the rest fetched as any read's is.
func (e *Engine) readAhead(ctx context.Context, r Request, n int64, alloc cufile.Allocation) (Result, error) {
	stager, err := e.stager(r.Device)
	if err != nil {
		return Result{}, err
	}
	a := r.Ahead
	var served int64
	var wait time.Duration
	if a.begin(e, r, n, stager) {
		if served, wait, err = a.serve(ctx, r, n, alloc); err != nil {
			a.Drop()
			return Result{CopyWait: wait}, err
		}
	}
	res := Result{Bytes: n, HTTPBytes: n, Transport: abi.TransportHTTP}
	if served < n {
		rest := r
		rest.Offset += served
		rest.DstOffset += uint64(served)
		res, err = e.readHTTP(ctx, rest, n-served, alloc)
		if err != nil {
			a.Drop()
			res.CopyWait += wait
			return res, err
		}
		if res.Bytes != n-served {
			return res, fmt.Errorf("rdmaread: %d of %d bytes carried", res.Bytes+served, n)
		}
		res.Bytes, res.HTTPBytes = n, n
	}
	res.CopyWait += wait
	e.aheadM.served.Add(float64(served))
	if served > 0 {
		a.topUp() // the slots this read took from are back in the share
	}
	return res, nil
}
