// Package staging is the ring of pinned host slots and the copy streams
// that carry object bytes from those slots into device allocations. It is
// one implementation of cufile.Stager shared by every backend (the CUDA
// binding and the host stand-in), so the checks and the slot life cycle are
// the same code for real devices and the stand-in; a backend supplies its
// Device.
package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

type slotState uint8

const (
	slotFree    slotState = iota
	slotHeld              // with a caller, being filled
	slotCopying           // copy enqueued, fence not yet seen complete
)

// ringSlot is a slot of the ring: the cufile.Slot its users hold, and the
// state the stager keeps of it.
type ringSlot struct {
	cufile.Slot

	index int
	state slotState
	fence uintptr // the event recorded after the slot's last copy
	seq   uint64  // enqueue order, to wait on the oldest copy first
	// copier enqueued the slot's pending copy and may take it back.
	copier *copier
}

// public is what a user of the stager holds of slot; nil for none.
func (slot *ringSlot) public() *cufile.Slot {
	if slot == nil {
		return nil
	}
	return &slot.Slot
}

// Device is what a stager needs from a backend. Every method but Ordinal
// and Run must be called inside Run, which makes the device current on the
// calling thread; one Run per batch keeps driver calls few.
type Device interface {
	Ordinal() int
	Run(fn func() error) error
	AllocHost(size int) ([]byte, error)
	FreeHost(buf []byte) error
	NewStream() (uintptr, error)
	DestroyStream(stream uintptr) error
	NewFence() (uintptr, error)
	DestroyFence(fence uintptr) error
	// CopyAsync enqueues the copy of src to dst at dstOff on stream and
	// records fence after it. A backend that can tell which copy failed
	// (the host stand-in) calls fault with that copy's failure before the
	// fence completes, and reports it nowhere else; one that cannot (a
	// CUDA fault poisons the whole context) reports it from its waits.
	CopyAsync(stream, fence uintptr, src []byte, dst cufile.Allocation, dstOff uint64, fault func(error)) error
	// copyDtoDAsync enqueues the copy of n bytes of src at srcOff to dst
	// at dstOff on stream (device to device, no slot involved); fault as
	// for CopyAsync.
	CopyDtoDAsync(stream uintptr, src cufile.Allocation, srcOff uint64, dst cufile.Allocation, dstOff uint64, n uint64, fault func(error)) error
	// CopyDtoHAsync enqueues the copy of len(dst) bytes of src at srcOff
	// into dst, part of a pinned slot, on stream; fault as for CopyAsync.
	CopyDtoHAsync(stream uintptr, src cufile.Allocation, srcOff uint64, dst []byte, fault func(error)) error
	// RecordFence records fence on stream after what is enqueued there.
	RecordFence(stream, fence uintptr) error
	FenceDone(fence uintptr) (bool, error)
	WaitFence(fence uintptr) error
	SyncStream(stream uintptr) error
	// AllocDevice allocates size bytes of the daemon's own device memory
	// (a slot's twin, see twin); Close frees it, outside Run.
	AllocDevice(size int) (cufile.Allocation, error)
}

// copyStream is one stream of the pool. A stream runs its copies in order,
// so its slots complete in the order of its copying queue.
type copyStream struct {
	handle uintptr
	// enqueue orders the driver calls that enqueue copies on this stream
	// with their entries in copying, without holding the stager's lock
	// through the calls: GETs on other streams go on meanwhile.
	enqueue sync.Mutex
	// The fields below are the stager's, under its lock.
	users   int         // open copiers on this stream
	copying []*ringSlot // oldest first
}

type stager struct {
	dev Device
	cfg cufile.StagerConfig

	mu     sync.Mutex
	chunks [][]byte // the pinned allocations the slots are cut from
	slots  []*ringSlot
	free   []*ringSlot
	// bySlot finds a slot of this ring from what its user holds.
	bySlot  map[*cufile.Slot]*ringSlot
	streams []*copyStream
	seq     uint64
	copiers int
	waiting bool // one acquirer is blocked on the oldest copy
	growing bool // one acquirer is pinning the next chunk of slots
	// growAfter is when the ring may grow again after pinning failed.
	growAfter time.Time
	changed   chan struct{} // closed and replaced whenever slots change state
	closed    bool
	// twins are device buffers of the daemon's own, one slot each, made
	// as copies to several destinations need them, up to maxTwins;
	// noTwins: one could not be allocated, and none is tried again.
	twins   []*twin
	noTwins bool
	// twinsMaking counts twins being allocated, outside the lock.
	twinsMaking int
}

// twin is a device buffer of a slot's size that a slot copied to several
// destinations goes through: one host-to-device copy into it, then one
// device-to-device copy per destination. Eight destinations on one GPU
// then cost the host link one copy, not eight; and each destination's
// bytes still come from the daemon's memory, never from another caller's
// buffer, which that caller may change at any time.
type twin struct {
	mem   cufile.Allocation
	fence uintptr // recorded after its last device-to-device copy
	busy  bool    // copies from it enqueued; free again once fence is done
	// claimed: taken for copies whose fence is not recorded yet, so that
	// the fence's last recording, done, says nothing of them.
	claimed bool
}

// maxTwins bounds a device's twins: a twin is busy only from its
// host-to-device copy until its copies out, a few slots' copy times, so a
// few per copy stream serve; beyond them copies go from the slot. A
// variable for tests.
var maxTwins = 32

// New makes a stager of dev's slot ring and copy streams, sized by cfg;
// it pins the ring's first chunk now and the rest as GETs need slots.
func New(dev Device, cfg cufile.StagerConfig) (cufile.Stager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cufile: stager: %w", err)
	}
	s := &stager{dev: dev, cfg: cfg, changed: make(chan struct{}), bySlot: map[*cufile.Slot]*ringSlot{}}
	err := dev.Run(func() error {
		// The first chunk now, so that a ring that cannot be pinned at all
		// fails here, where the caller asked for it.
		host, fences, err := s.pin(s.chunkSlots())
		if err != nil {
			return err
		}
		s.addLocked(host, fences)
		for range cfg.Streams {
			h, err := dev.NewStream()
			if err != nil {
				return err
			}
			s.streams = append(s.streams, &copyStream{handle: h})
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, s.destroy())
	}
	return s, nil
}

// destroy frees what New made; no copy may be outstanding.
func (s *stager) destroy() error {
	var twinErrs []error
	for _, tw := range s.twins {
		twinErrs = append(twinErrs, tw.mem.Close())
	}
	err := s.dev.Run(func() error {
		var errs []error
		for _, tw := range s.twins {
			errs = append(errs, s.dev.DestroyFence(tw.fence))
		}
		s.twins = nil
		for _, st := range s.streams {
			errs = append(errs, s.dev.DestroyStream(st.handle))
		}
		for _, slot := range s.slots {
			errs = append(errs, s.dev.DestroyFence(slot.fence))
			slot.Buf = nil
		}
		for _, host := range s.chunks {
			errs = append(errs, s.dev.FreeHost(host))
		}
		s.chunks = nil
		return errors.Join(errs...)
	})
	return errors.Join(append(twinErrs, err)...)
}

// growChunk is how many bytes of slots the ring pins at a time: as GETs
// need them, or all at once in the background (Fill, at a daemon's start),
// never the whole ring under one read, whose time it would show in.
// Variables for tests.
var (
	growChunk = 64 << 20
	// growPause is how long the ring waits before it tries to grow again
	// after pinning failed; meanwhile GETs wait for the slots it has.
	growPause = time.Second
)

// chunkSlots is how many slots the next growth pins.
func (s *stager) chunkSlots() int {
	return max(1, min(s.cfg.Slots-len(s.slots), growChunk/s.cfg.SlotSize))
}

// pin pins k slots' memory and makes their fences; called inside Run. On
// failure it frees what it made.
func (s *stager) pin(k int) ([]byte, []uintptr, error) {
	host, err := s.dev.AllocHost(k * s.cfg.SlotSize)
	if err != nil {
		return nil, nil, err
	}
	fences := make([]uintptr, 0, k)
	for range k {
		fence, err := s.dev.NewFence()
		if err != nil {
			for _, f := range fences {
				_ = s.dev.DestroyFence(f)
			}
			return nil, nil, errors.Join(err, s.dev.FreeHost(host))
		}
		fences = append(fences, fence)
	}
	return host, fences, nil
}

// addLocked cuts pinned memory into slots, one per fence, and frees them.
func (s *stager) addLocked(host []byte, fences []uintptr) {
	size := s.cfg.SlotSize
	s.chunks = append(s.chunks, host)
	for i, fence := range fences {
		slot := &ringSlot{Slot: cufile.Slot{Buf: host[i*size : (i+1)*size : (i+1)*size]}, index: len(s.slots), fence: fence}
		s.slots = append(s.slots, slot)
		s.bySlot[&slot.Slot] = slot
		s.free = append(s.free, slot)
	}
}

// grow pins the next chunk of slots outside the stager's lock; the caller
// set s.growing. A failure is not the caller's: the ring serves with the
// slots it has and tries again after growPause.
func (s *stager) grow(k int) error {
	var host []byte
	var fences []uintptr
	err := s.dev.Run(func() error {
		var err error
		host, fences, err = s.pin(k)
		return err
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.growing = false
	if err != nil {
		s.growAfter = time.Now().Add(growPause)
	} else {
		s.addLocked(host, fences)
	}
	s.notifyLocked()
	return err
}

// Fill pins the rest of the ring now, a chunk at a time, each chunk's
// slots free for acquirers as soon as it is in: a daemon that prepares its
// staging at start (Engine.Prepare) has the whole ring before its first
// GPU read, which would otherwise wait for chunks pinned under its GETs.
// It stops at the first chunk that cannot be pinned, whose error it
// returns; the ring then serves, and grows, as it would have.
func (s *stager) Fill(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		if s.closed || len(s.slots) >= s.cfg.Slots {
			s.mu.Unlock()
			return nil
		}
		if s.growing { // an acquirer is pinning the next chunk: wait for it
			changed := s.changed
			s.mu.Unlock()
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		s.growing = true
		k := s.chunkSlots()
		s.mu.Unlock()
		if err := s.grow(k); err != nil {
			return fmt.Errorf("cufile: pinning the staging ring (%d of %d bytes pinned): %w", s.Pinned(), int64(s.cfg.Slots)*int64(s.cfg.SlotSize), err)
		}
	}
}

// Pinned is the host memory the ring has pinned so far.
func (s *stager) Pinned() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.slots)) * int64(s.cfg.SlotSize)
}

func (s *stager) AcquireSlot(ctx context.Context) (*cufile.Slot, error) {
	slot, err := s.acquire(ctx, nil, nil)
	return slot.public(), err
}

// acquire takes a free slot, the one freed last. With own, the acquiring
// copier's stream, it first takes back that stream's completed copies, so
// that the free slots on top are those the CPU and the copy engine touched
// last, still in the CPU's cache. When none is free it reclaims every
// stream; failing that, one acquirer pins the next chunk of the ring while
// it has room to grow, or else blocks on the oldest copy, while the others
// wait for a change.
func (s *stager) acquire(ctx context.Context, waited *atomic.Int64, own *copyStream) (*ringSlot, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if own != nil {
			s.reclaim(own)
		}
		s.mu.Lock()
		if len(s.free) == 0 && !s.closed {
			s.mu.Unlock()
			s.reclaim(s.streams...)
			s.mu.Lock()
		}
		if s.closed {
			s.mu.Unlock()
			return nil, cufile.ErrClosed
		}
		if n := len(s.free); n > 0 {
			slot := s.free[n-1]
			s.free = s.free[:n-1]
			slot.state = slotHeld
			s.mu.Unlock()
			return slot, nil
		}
		if !s.growing && len(s.slots) < s.cfg.Slots && time.Now().After(s.growAfter) {
			s.growing = true
			k := s.chunkSlots()
			s.mu.Unlock()
			_ = s.grow(k) // a failure is not this acquirer's: it waits for a slot
			continue
		}
		oldest := s.oldestCopyingLocked()
		if oldest != nil && !s.waiting {
			s.waiting = true
			s.mu.Unlock()
			start := time.Now()
			err := s.dev.Run(func() error { return s.dev.WaitFence(oldest.fence) })
			addSince(waited, start)
			s.mu.Lock()
			s.waiting = false
			if err != nil {
				s.failOldestLocked(oldest, err)
			}
			s.notifyLocked()
			s.mu.Unlock()
			continue // the next round takes it back
		}
		changed := s.changed
		s.mu.Unlock()
		start := time.Now()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		if oldest != nil {
			addSince(waited, start)
		}
	}
}

// TryAcquireSlot takes a free slot as acquire does, but never waits for a
// copy: nil when none is free and the ring cannot grow now.
func (s *stager) TryAcquireSlot() *cufile.Slot {
	for {
		s.mu.Lock()
		if len(s.free) == 0 && !s.closed {
			s.mu.Unlock()
			s.reclaim(s.streams...)
			s.mu.Lock()
		}
		if s.closed {
			s.mu.Unlock()
			return nil
		}
		if n := len(s.free); n > 0 {
			slot := s.free[n-1]
			s.free = s.free[:n-1]
			slot.state = slotHeld
			s.mu.Unlock()
			return slot.public()
		}
		if s.growing || len(s.slots) >= s.cfg.Slots || !time.Now().After(s.growAfter) {
			s.mu.Unlock()
			return nil
		}
		s.growing = true
		k := s.chunkSlots()
		s.mu.Unlock()
		_ = s.grow(k)
	}
}

func (s *stager) ReleaseSlot(slot *cufile.Slot) { s.release(slot) }

func addSince(total *atomic.Int64, start time.Time) {
	if total != nil {
		total.Add(int64(time.Since(start)))
	}
}

func (s *stager) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *stager) freeLocked(slot *ringSlot) {
	slot.state = slotFree
	slot.copier = nil
	s.free = append(s.free, slot)
}

// reclaimHeads is how many copies of a stream one reclaim looks at.
const reclaimHeads = 8

// reclaim returns to the ring the completed copies at the heads of streams.
// It queries their fences outside the stager's lock, so that copiers on
// other streams are not held up by the driver; a copy is taken back only if
// its slot is still its stream's head with the same copy once the lock is
// taken again (another reclaim may have taken it first).
func (s *stager) reclaim(streams ...*copyStream) {
	type head struct {
		slot   *ringSlot
		seq    uint64
		copier *copier // whose copy it is, to report a failure to
		err    error
	}
	type look struct {
		st    *copyStream
		heads []head
		done  int
	}
	var looks []look
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	for _, st := range streams {
		if len(st.copying) == 0 {
			continue
		}
		l := look{st: st}
		for _, slot := range st.copying[:min(len(st.copying), reclaimHeads)] {
			l.heads = append(l.heads, head{slot: slot, seq: slot.seq, copier: slot.copier})
		}
		looks = append(looks, l)
	}
	s.mu.Unlock()
	if len(looks) == 0 {
		return
	}
	runErr := s.dev.Run(func() error {
		for i := range looks {
			l := &looks[i]
			for l.done < len(l.heads) {
				h := &l.heads[l.done]
				done, err := s.dev.FenceDone(h.slot.fence)
				if err != nil {
					// The copy failed: the slot is free to reuse and
					// the copier that made it reports the failure.
					h.err, done = err, true
				}
				if !done {
					break
				}
				l.done++
			}
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if runErr != nil {
		// The device cannot be made current: no copy on it can be
		// waited for, so give the slots back and fail the copiers whose
		// copies they were on their Sync.
		for _, l := range looks {
			st := l.st
			for _, slot := range st.copying {
				slot.copier.noteErr(runErr)
				s.freeLocked(slot)
			}
			st.copying = nil
		}
		s.notifyLocked()
		return
	}
	freed := false
	for _, l := range looks {
		st := l.st
		for _, h := range l.heads[:l.done] {
			if len(st.copying) == 0 || st.copying[0] != h.slot || h.slot.seq != h.seq {
				continue // taken back by another reclaim meanwhile
			}
			if h.err != nil {
				h.copier.noteErr(h.err)
			}
			st.copying = st.copying[1:]
			s.freeLocked(h.slot)
			freed = true
		}
	}
	if freed {
		s.notifyLocked()
	}
}

// noteErr keeps err, a failure the device reported while its copies were
// waited for or reclaimed, for c's next Sync; nil c (a slot no copier
// enqueued) drops it.
func (c *copier) noteErr(err error) {
	if c == nil {
		return
	}
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if !c.deviceErr {
		c.errs = append(c.errs, err)
		c.deviceErr = true
	}
}

// faultTo returns what a backend calls when a copy of c's into dst fails:
// the first failure per destination is kept for c's next Sync.
func (c *copier) faultTo(dst cufile.Allocation) func(error) {
	return func(err error) {
		c.fmu.Lock()
		defer c.fmu.Unlock()
		for _, e := range c.errs {
			if ce, ok := e.(*cufile.CopyError); ok && ce.Dst == dst {
				return
			}
		}
		c.errs = append(c.errs, &cufile.CopyError{Dst: dst, Err: err})
	}
}

// takeErrs returns and forgets the failures kept for Sync.
func (c *copier) takeErrs() []error {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	errs := c.errs
	c.errs, c.deviceErr = nil, false
	return errs
}

func (s *stager) oldestCopyingLocked() *ringSlot {
	var oldest *ringSlot
	for _, st := range s.streams {
		if len(st.copying) > 0 && (oldest == nil || st.copying[0].seq < oldest.seq) {
			oldest = st.copying[0]
		}
	}
	return oldest
}

// failOldestLocked gives back a slot whose fence could not be waited for.
func (s *stager) failOldestLocked(slot *ringSlot, err error) {
	for _, st := range s.streams {
		if len(st.copying) > 0 && st.copying[0] == slot {
			slot.copier.noteErr(err)
			st.copying = st.copying[1:]
			s.freeLocked(slot)
			return
		}
	}
}

// ownsLocked returns the slot of this ring that p is, if it is in state.
func (s *stager) ownsLocked(p *cufile.Slot, state slotState) (*ringSlot, bool) {
	slot, ok := s.bySlot[p]
	if !ok || slot.state != state {
		return nil, false
	}
	return slot, true
}

func (s *stager) release(p *cufile.Slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot, ok := s.ownsLocked(p, slotHeld); ok {
		s.freeLocked(slot)
		s.notifyLocked()
	}
}

func (s *stager) Busy() (held, copying int) {
	s.reclaim(s.streams...) // copies that completed are not busy
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, slot := range s.slots {
		switch slot.state {
		case slotHeld:
			held++
		case slotCopying:
			copying++
		}
	}
	return held, copying
}

func (s *stager) NewCopier() (cufile.Copier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, cufile.ErrClosed
	}
	least := s.streams[0]
	for _, st := range s.streams[1:] {
		if st.users < least.users {
			least = st
		}
	}
	least.users++
	s.copiers++
	return &copier{s: s, stream: least}, nil
}

func (s *stager) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	held := 0
	for _, slot := range s.slots {
		if slot.state == slotHeld {
			held++
		}
	}
	if held > 0 || s.copiers > 0 {
		s.mu.Unlock()
		return fmt.Errorf("cufile: stager busy: %d slots held, %d copiers open", held, s.copiers)
	}
	s.closed = true
	s.notifyLocked()
	// An acquirer may still be blocked on a fence or pinning slots: let it
	// finish before the fences and the memory are freed.
	for s.waiting || s.growing {
		changed := s.changed
		s.mu.Unlock()
		<-changed
		s.mu.Lock()
	}
	s.mu.Unlock()

	err := s.dev.Run(func() error {
		var errs []error
		for _, st := range s.streams {
			errs = append(errs, s.dev.SyncStream(st.handle))
			st.copying = nil
		}
		return errors.Join(errs...)
	})
	return errors.Join(err, s.destroy())
}

// copier is one request's ordered sequence of copies on one stream.
type copier struct {
	s      *stager
	stream *copyStream
	waited atomic.Int64
	closed bool
	// last and lastSeq are the slot this copier enqueued last and its
	// enqueue order: on a stream shared with other copiers, waiting for it
	// waits for every copy of this copier and none queued after it.
	last    *ringSlot
	lastSeq uint64
	// unfenced: a device-to-device copy was enqueued after last, with no
	// fence of its own, so only a stream synchronisation covers it.
	unfenced bool
	// fmu guards errs, written by the backend's copy workers too: the
	// failures of this copier's copies since the last Sync (cufile.CopyError per
	// destination, then at most one failure the device reported).
	fmu       sync.Mutex
	errs      []error
	deviceErr bool
}

func (c *copier) AcquireSlot(ctx context.Context) (*cufile.Slot, error) {
	if c.closed {
		return nil, cufile.ErrClosed
	}
	// One pool for every copier: take back this stream's landed copies
	// first, so that the slot on top is one still in the CPU's cache.
	slot, err := c.s.acquire(ctx, &c.waited, c.stream)
	return slot.public(), err
}

func (c *copier) ReleaseSlot(slot *cufile.Slot) { c.s.release(slot) }

func (c *copier) WaitNanos() int64 { return c.waited.Load() }

func (c *copier) CopyAsync(p *cufile.Slot, n int, dst cufile.Allocation, dstOff uint64) error {
	s := c.s
	s.mu.Lock()
	slot, ok := s.ownsLocked(p, slotHeld)
	if !ok {
		s.mu.Unlock()
		return errors.New("cufile: CopyAsync of a slot not held from this stager")
	}
	s.mu.Unlock()
	// The slot is held: nothing but this caller changes it until the copy
	// is recorded, and the stager does not close under a held slot.
	err := c.checkCopy(len(slot.Buf), n, dst, dstOff)
	if err == nil && n > 0 {
		st := c.stream
		st.enqueue.Lock()
		if err = c.enqueue(slot, slot.Buf[:n], dst, dstOff); err == nil {
			s.mu.Lock()
			c.copyingLocked(slot)
			s.mu.Unlock()
		}
		st.enqueue.Unlock()
		if err == nil {
			return nil
		}
	}
	s.mu.Lock()
	s.freeLocked(slot)
	s.notifyLocked()
	s.mu.Unlock()
	return err
}

// enqueue enqueues the copy of src, part of slot, on the copier's stream,
// with the slot's fence recorded after it; the stream's enqueue lock is held.
func (c *copier) enqueue(slot *ringSlot, src []byte, dst cufile.Allocation, dstOff uint64) error {
	s := c.s
	return s.dev.Run(func() error {
		err := s.dev.CopyAsync(c.stream.handle, slot.fence, src, dst, dstOff, c.faultTo(dst))
		if err != nil {
			// The copy may be enqueued without its fence: drain the
			// stream before the slot can be filled again.
			return errors.Join(err, s.dev.SyncStream(c.stream.handle))
		}
		return nil
	})
}

// copyingLocked records slot's copies as enqueued: it is the stream's
// newest, and comes back to this copier once they complete.
func (c *copier) copyingLocked(slot *ringSlot) {
	s := c.s
	s.seq++
	slot.seq = s.seq
	slot.state = slotCopying
	slot.copier = c
	c.stream.copying = append(c.stream.copying, slot)
	c.last, c.lastSeq, c.unfenced = slot, slot.seq, false
	s.notifyLocked()
}

// CopyAsyncMany enqueues the copies of pieces of one slot to several
// destinations on this copier's stream, in order, and records the slot's
// fence after the last: the slot is filled once and returns to the ring when
// every copy of it has completed. A piece that is refused (out of range, a
// closed allocation) gets its error at its index and is skipped; the others
// are enqueued. It takes the slot in every case.
func (c *copier) CopyAsyncMany(p *cufile.Slot, pieces []cufile.SlotCopy) []error {
	s := c.s
	errs := make([]error, len(pieces))
	s.mu.Lock()
	slot, ok := s.ownsLocked(p, slotHeld)
	if !ok {
		s.mu.Unlock()
		for i := range errs {
			errs[i] = errors.New("cufile: CopyAsyncMany of a slot not held from this stager")
		}
		return errs
	}
	s.mu.Unlock()
	st := c.stream
	st.enqueue.Lock()
	enqueued := false
	if c.copyThroughTwin(slot, pieces, errs) {
		s.mu.Lock()
		c.copyingLocked(slot)
		// The copies out of the twin end after the slot's fence: only a
		// stream synchronisation covers them.
		c.unfenced = true
		s.mu.Unlock()
		st.enqueue.Unlock()
		return errs
	}
	for i, p := range pieces {
		if p.Off < 0 || p.Off > len(slot.Buf) {
			errs[i] = fmt.Errorf("%w: piece at %d of a %d-byte slot", cufile.ErrOutOfRange, p.Off, len(slot.Buf))
			continue
		}
		src := slot.Buf[p.Off:]
		if errs[i] = c.checkCopy(len(src), p.N, p.Dst, p.DstOff); errs[i] != nil || p.N == 0 {
			continue
		}
		if errs[i] = c.enqueue(slot, src[:p.N], p.Dst, p.DstOff); errs[i] == nil {
			enqueued = true
		}
	}
	s.mu.Lock()
	if enqueued {
		c.copyingLocked(slot)
	} else {
		s.freeLocked(slot)
		s.notifyLocked()
	}
	s.mu.Unlock()
	st.enqueue.Unlock()
	return errs
}

// copyThroughTwin enqueues the copies of pieces of slot to two or more
// destinations through a twin (see twin): the part of the slot they cover
// into the twin, with the slot's fence after it (the slot returns to the
// ring once that copy is done), then one device-to-device copy per piece,
// with the twin's fence after the last. A refused piece gets its error in
// errs. It returns false, having enqueued nothing, where fewer than two
// pieces are to be copied or no twin is free: the caller copies from the
// slot. Called with the stream's enqueue lock held.
func (c *copier) copyThroughTwin(slot *ringSlot, pieces []cufile.SlotCopy, errs []error) bool {
	s := c.s
	lo, hi, valid := len(slot.Buf), 0, 0
	for i, p := range pieces {
		if p.Off < 0 || p.Off > len(slot.Buf) {
			errs[i] = fmt.Errorf("%w: piece at %d of a %d-byte slot", cufile.ErrOutOfRange, p.Off, len(slot.Buf))
			continue
		}
		if errs[i] = c.checkCopy(len(slot.Buf)-p.Off, p.N, p.Dst, p.DstOff); errs[i] != nil || p.N == 0 {
			continue
		}
		lo, hi, valid = min(lo, p.Off), max(hi, p.Off+p.N), valid+1
	}
	if valid < 2 {
		clear(errs) // the caller checks every piece again
		return false
	}
	tw := s.takeTwin()
	if tw == nil {
		clear(errs)
		return false
	}
	// A failure of the copy into the twin reaches every destination.
	faultAll := func(err error) {
		for i, p := range pieces {
			if errs[i] == nil && p.N > 0 {
				c.faultTo(p.Dst)(err)
			}
		}
	}
	err := s.dev.Run(func() error {
		if err := s.dev.CopyAsync(c.stream.handle, slot.fence, slot.Buf[lo:hi], tw.mem, uint64(lo), faultAll); err != nil {
			return err
		}
		for i, p := range pieces {
			if errs[i] != nil || p.N == 0 {
				continue
			}
			errs[i] = s.dev.CopyDtoDAsync(c.stream.handle, tw.mem, uint64(p.Off), p.Dst, p.DstOff, uint64(p.N), c.faultTo(p.Dst))
		}
		if err := s.dev.RecordFence(c.stream.handle, tw.fence); err != nil {
			// The twin's copies may be enqueued without its fence: drain
			// the stream before it can be taken again.
			return errors.Join(err, s.dev.SyncStream(c.stream.handle))
		}
		return nil
	})
	if err != nil {
		// Nothing known to be enqueued after a failure there: the stream
		// is drained, and the caller copies from the slot.
		_ = s.dev.Run(func() error { return s.dev.SyncStream(c.stream.handle) })
		s.putTwin(tw, false)
		clear(errs)
		return false
	}
	s.putTwin(tw, true)
	return true
}

// takeTwin returns a free twin, marked busy, making one where there are
// fewer than maxTwins; nil when none is free or can be made.
func (s *stager) takeTwin() *twin {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tw := range s.twins {
		if tw.claimed {
			continue
		}
		if !tw.busy {
			tw.busy, tw.claimed = true, true
			return tw
		}
		// A failed copy out of it was its destination's failure, reported
		// to its copier: the twin is free all the same.
		if done, _ := s.fenceDone(tw.fence); done {
			tw.claimed = true // stays busy: taken again
			return tw
		}
	}
	if s.noTwins || len(s.twins)+s.twinsMaking >= maxTwins {
		return nil
	}
	// Allocated outside the lock: acquirers and reclaims go on meanwhile.
	s.twinsMaking++
	s.mu.Unlock()
	tw := &twin{busy: true, claimed: true}
	err := s.dev.Run(func() error {
		fence, err := s.dev.NewFence()
		if err != nil {
			return err
		}
		if tw.mem, err = s.dev.AllocDevice(s.cfg.SlotSize); err != nil {
			return errors.Join(err, s.dev.DestroyFence(fence))
		}
		tw.fence = fence
		return nil
	})
	s.mu.Lock()
	s.twinsMaking--
	if err != nil {
		s.noTwins = true
		return nil
	}
	s.twins = append(s.twins, tw)
	return tw
}

// putTwin ends a twin's claim: with copies enqueued and its fence recorded
// after them (busy until the fence is done), or with none.
func (s *stager) putTwin(tw *twin, enqueued bool) {
	s.mu.Lock()
	tw.busy, tw.claimed = enqueued, false
	s.mu.Unlock()
}

// fenceDone asks the device whether fence is done; called with mu held (a
// query of an event, which does not wait).
func (s *stager) fenceDone(fence uintptr) (done bool, err error) {
	err = s.dev.Run(func() error {
		done, err = s.dev.FenceDone(fence)
		return err
	})
	return done, err
}

// CopyHeldAsync enqueues the copy of slot.Buf[off:off+n] to dst at dstOff
// and leaves the slot held: its holder keeps the bytes to copy again. The
// copy records the slot's fence, which nothing waits on while the slot is
// held, so the copier's Sync synchronises its whole stream, as after a
// device-to-device copy.
func (c *copier) CopyHeldAsync(p *cufile.Slot, off, n int, dst cufile.Allocation, dstOff uint64) error {
	s := c.s
	s.mu.Lock()
	slot, ok := s.ownsLocked(p, slotHeld)
	s.mu.Unlock()
	if !ok {
		return errors.New("cufile: CopyHeldAsync of a slot not held from this stager")
	}
	if off < 0 || off > len(slot.Buf) {
		return fmt.Errorf("%w: piece at %d of a %d-byte slot", cufile.ErrOutOfRange, off, len(slot.Buf))
	}
	if err := c.checkCopy(len(slot.Buf)-off, n, dst, dstOff); err != nil || n == 0 {
		return err
	}
	st := c.enqueueUnfenced()
	defer st.enqueue.Unlock()
	return c.enqueue(slot, slot.Buf[off:off+n], dst, dstOff)
}

// CopyDeviceAsync enqueues a device-to-device copy of n bytes from src at
// srcOff to dst at dstOff on this copier's stream, after every copy the
// copier enqueued before it: bytes another copy of this copier landed in
// src are copied on without asking the server again.
func (c *copier) CopyDeviceAsync(src cufile.Allocation, srcOff uint64, dst cufile.Allocation, dstOff uint64, n int64) error {
	s := c.s
	switch {
	case c.closed:
		return cufile.ErrClosed
	case src == nil || dst == nil:
		return fmt.Errorf("%w: no allocation", cufile.ErrBadHandle)
	case n < 0:
		return fmt.Errorf("%w: %d bytes", cufile.ErrOutOfRange, n)
	case src.Device() != s.dev.Ordinal() || dst.Device() != s.dev.Ordinal():
		return fmt.Errorf("%w: allocations on devices %d and %d, stager on device %d", cufile.ErrNoDevice, src.Device(), dst.Device(), s.dev.Ordinal())
	}
	for _, a := range []struct {
		alloc cufile.Allocation
		off   uint64
	}{{src, srcOff}, {dst, dstOff}} {
		if size := a.alloc.Size(); a.off > size || uint64(n) > size-a.off {
			return fmt.Errorf("%w: %d bytes at offset %d of a %d-byte allocation", cufile.ErrOutOfRange, n, a.off, size)
		}
	}
	if n == 0 {
		return nil
	}
	st := c.enqueueUnfenced()
	defer st.enqueue.Unlock()
	return s.dev.Run(func() error {
		return s.dev.CopyDtoDAsync(st.handle, src, srcOff, dst, dstOff, uint64(n), c.faultTo(dst))
	})
}

// CopyFromDeviceAsync enqueues the copy of n bytes of src at srcOff into
// slot.Buf[:n] on this copier's stream and leaves the slot with its
// holder: the bytes are there once Sync has returned without error. As
// after a device-to-device copy, Sync synchronises the whole stream.
func (c *copier) CopyFromDeviceAsync(src cufile.Allocation, srcOff uint64, p *cufile.Slot, n int) error {
	s := c.s
	s.mu.Lock()
	slot, ok := s.ownsLocked(p, slotHeld)
	s.mu.Unlock()
	if !ok {
		return errors.New("cufile: CopyFromDeviceAsync into a slot not held from this stager")
	}
	// The device range is checked as a destination would be: the same
	// bounds, the same device.
	if err := c.checkCopy(len(slot.Buf), n, src, srcOff); err != nil || n == 0 {
		return err
	}
	st := c.enqueueUnfenced()
	defer st.enqueue.Unlock()
	return s.dev.Run(func() error {
		return s.dev.CopyDtoHAsync(st.handle, src, srcOff, slot.Buf[:n], c.faultTo(src))
	})
}

// enqueueUnfenced takes the copier's stream for an enqueue (the caller
// unlocks st.enqueue) of a copy that no slot's fence covers, so that the
// copier's next Sync synchronises its whole stream.
func (c *copier) enqueueUnfenced() (st *copyStream) {
	st = c.stream
	st.enqueue.Lock()
	c.s.mu.Lock()
	c.unfenced = true // read by syncTarget under the lock
	c.s.mu.Unlock()
	return st
}

// checkCopy refuses a copy before anything is enqueued.
func (c *copier) checkCopy(slotLen, n int, dst cufile.Allocation, dstOff uint64) error {
	switch {
	case c.closed:
		return cufile.ErrClosed
	case dst == nil:
		return fmt.Errorf("%w: no allocation", cufile.ErrBadHandle)
	case n < 0 || n > slotLen:
		return fmt.Errorf("%w: %d bytes from a %d-byte slot", cufile.ErrOutOfRange, n, slotLen)
	case dst.Device() != c.s.dev.Ordinal():
		return fmt.Errorf("%w: allocation on device %d, stager on device %d", cufile.ErrNoDevice, dst.Device(), c.s.dev.Ordinal())
	}
	if size := dst.Size(); dstOff > size || uint64(n) > size-dstOff {
		return fmt.Errorf("%w: %d bytes at offset %d of a %d-byte allocation", cufile.ErrOutOfRange, n, dstOff, size)
	}
	return nil
}

func (c *copier) Drain() error {
	s := c.s
	err := s.dev.Run(func() error { return s.dev.SyncStream(c.stream.handle) })
	if err != nil {
		c.noteErr(err)
	}
	return err
}

func (c *copier) Sync() error {
	if c.closed {
		return cufile.ErrClosed
	}
	return c.sync()
}

func (c *copier) sync() error {
	s := c.s
	start := time.Now()
	fence, whole := c.syncTarget()
	var err error
	switch {
	case whole:
		err = s.dev.Run(func() error { return s.dev.SyncStream(c.stream.handle) })
	case fence != 0:
		err = s.dev.Run(func() error { return s.dev.WaitFence(fence) })
	}
	addSince(&c.waited, start)
	// Only this copier's failures: another request's copy that failed on
	// the same stream is that request's to report. (What the wait itself
	// returned is the device's word on this copier's copies.)
	errs := c.takeErrs()
	switch {
	case len(errs) == 0:
		return err
	case err == nil && len(errs) == 1:
		return errs[0]
	}
	return errors.Join(append([]error{err}, errs...)...)
}

// syncTarget says what sync waits for. A stream of the copier's own (one
// copier per stream) is synchronised whole. On a stream
// shared by a pool's copiers, the copier's last slot's fence is enough (a
// stream runs in order) and waits for no other copier's copies queued
// behind it; no fence (0, false) means that slot is already back, its copy
// complete.
func (c *copier) syncTarget() (fence uintptr, whole bool) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.unfenced || c.stream.users <= 1 {
		return 0, true
	}
	if c.last == nil {
		return 0, false
	}
	if c.last.state == slotCopying && c.last.seq == c.lastSeq {
		// Should the slot come back and be copied again before the
		// wait, the wait is for a later copy: longer, never too short.
		return c.last.fence, false
	}
	return 0, false
}

func (c *copier) Close() error {
	if c.closed {
		return nil
	}
	err := c.sync()
	c.closed = true
	s := c.s
	s.mu.Lock()
	c.stream.users--
	s.copiers--
	s.notifyLocked()
	s.mu.Unlock()
	return err
}
