package staging_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/cufile/staging"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

func newTestStager(t *testing.T, b cufile.Backend, cfg cufile.StagerConfig) cufile.Stager {
	t.Helper()
	st, err := b.NewStager(0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("stager Close: %v", err)
		}
	})
	return st
}

func acquireWithin(st interface {
	AcquireSlot(context.Context) (*cufile.Slot, error)
}, d time.Duration) (*cufile.Slot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return st.AcquireSlot(ctx)
}

// Many requests share a small ring, pinned a slot at a time as they need
// it, while copies lag behind fills: no slot is ever handed out twice or
// refilled before its copy has landed, and every byte arrives.
func TestSlotRingReuseUnderConcurrency(t *testing.T) {
	b, dir := standin(t)
	hoststandin.SlowCopies(b, 100*time.Microsecond)
	const workers, chunks, slotSize = 8, 40, 4096
	smallChunks(t, slotSize, time.Second)
	const region = chunks * slotSize
	path := cufiletest.StandinFile(t, dir, "buf", workers*region, 0)
	a, err := b.Import(0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: slotSize, Slots: 3, Streams: 2})

	var holder [3]atomic.Int32 // which worker holds each slot, 0 for none
	want := make([]byte, workers*region)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 1; w <= workers; w++ {
		data := cufiletest.Pattern(region, uint64(w))
		copy(want[(w-1)*region:], data)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.NewCopier()
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			off := uint64((w - 1) * region)
			for i := 0; i < region; {
				slot, err := c.AcquireSlot(context.Background())
				if err != nil {
					errs <- err
					return
				}
				idx := staging.SlotIndex(st, slot)
				if !holder[idx].CompareAndSwap(0, int32(w)) {
					errs <- fmt.Errorf("slot %d handed to worker %d while worker %d holds it", idx, w, holder[idx].Load())
					return
				}
				n := min(1+(i*7919)%slotSize, region-i) // odd sizes
				copy(slot.Buf, data[i:i+n])
				holder[idx].Store(0)
				if err := c.CopyAsync(slot, n, a, off+uint64(i)); err != nil {
					errs <- err
					return
				}
				i += n
			}
			if err := c.Sync(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if cufiletest.FileSum(t, path) != sha256.Sum256(want) {
		t.Fatal("file differs from what was copied")
	}

	if got := st.Pinned(); got != 3*slotSize {
		t.Fatalf("the ring pinned %d bytes, want its 3 slots", got)
	}
	// Every slot is back: three can be taken (at once; the deadline is
	// for a busy machine), a fourth cannot.
	for i := range 3 {
		if _, err := acquireWithin(st, 10*time.Second); err != nil {
			t.Fatalf("slot %d after the run: %v", i, err)
		}
	}
	if _, err := acquireWithin(st, 20*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fourth slot: %v; want DeadlineExceeded", err)
	}
	staging.ReleaseAll(st)
}

func TestAcquireSlotHonoursContext(t *testing.T) {
	b, _ := standin(t)
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	slot, err := st.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquireWithin(st, 20*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireSlot with every slot held = %v", err)
	}

	// A blocked acquirer gets the slot as soon as it is released.
	got := make(chan *cufile.Slot)
	go func() {
		s, _ := acquireWithin(st, 5*time.Second)
		got <- s
	}()
	time.Sleep(10 * time.Millisecond)
	c, _ := st.NewCopier()
	defer c.Close()
	c.ReleaseSlot(slot)
	if s := <-got; s != slot {
		t.Fatalf("blocked acquirer got %v", s)
	}
	c.ReleaseSlot(slot)
}

// With one slot, the next acquire must wait for the copy to land; that
// wait and Sync's count in WaitNanos.
func TestAcquireWaitsForCopyAndCountsIt(t *testing.T) {
	b, dir := standin(t)
	const delay = 200 * time.Millisecond
	hoststandin.SlowCopies(b, delay)
	path := cufiletest.StandinFile(t, dir, "buf", 128, 0)
	a, err := b.Import(0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	c, _ := st.NewCopier()
	defer c.Close()

	slot, _ := c.AcquireSlot(context.Background())
	copy(slot.Buf, bytes.Repeat([]byte{1}, 64))
	// The copy lands no sooner than delay after it is enqueued, so the
	// slot cannot come back sooner than that after start, however the
	// goroutines are scheduled.
	start := time.Now()
	if err := c.CopyAsync(slot, 64, a, 0); err != nil {
		t.Fatal(err)
	}
	slot, err = c.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if waited < delay {
		t.Fatalf("slot came back after %v, before its copy (%v) could land", waited, delay)
	}
	// The first copy has landed before its slot was refilled.
	if b, _ := os.ReadFile(path); !bytes.Equal(b[:64], bytes.Repeat([]byte{1}, 64)) {
		t.Fatal("first copy not landed when its slot came back")
	}
	// WaitNanos counts the wait from when AcquireSlot began it, so it
	// falls short of delay only by the time from CopyAsync to that start;
	// the slack of delay/2 is for a busy machine. It cannot count more
	// than the call took.
	if w := c.WaitNanos(); w < int64(delay/2) || w > int64(waited) {
		t.Fatalf("WaitNanos = %v after waiting for a copy, the whole call %v", time.Duration(w), waited)
	}
	copy(slot.Buf, bytes.Repeat([]byte{2}, 64))
	if err := c.CopyAsync(slot, 64, a, 64); err != nil {
		t.Fatal(err)
	}
	before := c.WaitNanos()
	// As above: the copy takes delay, and Sync begins its wait at once.
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if c.WaitNanos()-before < int64(delay/2) {
		t.Fatalf("Sync waited %v, not counted", time.Duration(c.WaitNanos()-before))
	}
	want := append(bytes.Repeat([]byte{1}, 64), bytes.Repeat([]byte{2}, 64)...)
	if b, _ := os.ReadFile(path); !bytes.Equal(b, want) {
		t.Fatal("copies not landed after Sync")
	}
}

func TestReleaseSlotTwiceIsHarmless(t *testing.T) {
	b, _ := standin(t)
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 2, Streams: 1})
	c, _ := st.NewCopier()
	defer c.Close()
	slot, _ := st.AcquireSlot(context.Background())
	c.ReleaseSlot(slot)
	c.ReleaseSlot(slot)
	c.ReleaseSlot(nil)
	s1, err1 := acquireWithin(st, 10*time.Second)
	s2, err2 := acquireWithin(st, 10*time.Second)
	if err1 != nil || err2 != nil || s1 == s2 {
		t.Fatalf("two acquires: %p %v, %p %v", s1, err1, s2, err2)
	}
	if _, err := acquireWithin(st, 20*time.Millisecond); err == nil {
		t.Fatal("a third slot appeared after a double release")
	}
	c.ReleaseSlot(s1)
	c.ReleaseSlot(s2)
}

func TestCopyAsyncRefusesSlotsNotHeld(t *testing.T) {
	b, dir := standin(t)
	cufiletest.StandinFile(t, dir, "buf", 100, 0)
	a, _ := b.Import(0, cufiletest.NameHandle("buf"))
	defer a.Close()
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	other := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	c, _ := st.NewCopier()
	defer c.Close()

	foreign, _ := other.AcquireSlot(context.Background())
	if err := c.CopyAsync(foreign, 1, a, 0); err == nil {
		t.Error("CopyAsync took another stager's slot")
	}
	staging.ReleaseAll(other)

	slot, _ := c.AcquireSlot(context.Background())
	c.ReleaseSlot(slot)
	if err := c.CopyAsync(slot, 1, a, 0); err == nil {
		t.Error("CopyAsync took a released slot")
	}
	if err := c.CopyAsync(&cufile.Slot{Buf: make([]byte, 64)}, 1, a, 0); err == nil {
		t.Error("CopyAsync took a made-up slot")
	}
}

func TestStagerCloseWhileBusy(t *testing.T) {
	b, _ := standin(t)
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 64, Slots: 2, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	slot, _ := st.AcquireSlot(context.Background())
	if err := st.Close(); err == nil {
		t.Fatal("Close with a slot held succeeded")
	}
	c, _ := st.NewCopier()
	c.ReleaseSlot(slot)
	if err := st.Close(); err == nil {
		t.Fatal("Close with a copier open succeeded")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second copier Close: %v", err)
	}
	if err := c.Sync(); !errors.Is(err, cufile.ErrClosed) {
		t.Errorf("Sync after Close = %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := st.AcquireSlot(context.Background()); !errors.Is(err, cufile.ErrClosed) {
		t.Errorf("AcquireSlot after Close = %v", err)
	}
	if _, err := st.NewCopier(); !errors.Is(err, cufile.ErrClosed) {
		t.Errorf("NewCopier after Close = %v", err)
	}
}

func TestCopiersSpreadOverStreams(t *testing.T) {
	b, _ := standin(t)
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 2})
	var cs []cufile.Copier
	for range 4 {
		c, err := st.NewCopier()
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	stream := func(c cufile.Copier) any { s, _ := staging.CopierStream(c); return s }
	if stream(cs[0]) == stream(cs[1]) || stream(cs[2]) == stream(cs[3]) {
		t.Fatal("copiers share a stream while another is idle")
	}
	// Free one stream: the next copier gets it to itself.
	idle := stream(cs[0])
	if stream(cs[2]) != idle {
		t.Fatal("third copier not on the first stream")
	}
	cs[0].Close()
	cs[2].Close()
	c, _ := st.NewCopier()
	if got, users := staging.CopierStream(c); got != idle || users != 1 {
		t.Error("new copier not on the idle stream")
	}
	c.Close()
	cs[1].Close()
	cs[3].Close()
}

func TestStagerConfig(t *testing.T) {
	b, _ := standin(t)
	for _, c := range []struct {
		cfg  cufile.StagerConfig
		want string
	}{
		{cufile.StagerConfig{Slots: 2, Streams: 1}, "SlotSize 0"},
		{cufile.StagerConfig{SlotSize: -1, Slots: 2, Streams: 1}, "SlotSize -1"},
		{cufile.StagerConfig{SlotSize: 64, Streams: 1}, "Slots 0"},
		{cufile.StagerConfig{SlotSize: 64, Slots: 2}, "Streams 0"},
		{cufile.StagerConfig{SlotSize: 1 << 62, Slots: 4, Streams: 1}, "Slots 4"},
	} {
		if _, err := b.NewStager(0, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewStager(%+v): %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
}

// The ring is a pool whose slot freed last is taken first: a copier whose
// copies have landed before it asks again (syncEach) refills the one slot
// it used, not the next of the ring.
func TestCopierRefillsTheSlotFreedLast(t *testing.T) {
	for _, tc := range []struct {
		wantMaxDistinct int
		syncEach        bool
	}{{1, true}} {
		t.Run("pool", func(t *testing.T) {
			b, dir := standin(t)
			hoststandin.SlowCopies(b, 200*time.Microsecond)
			const slotSize, chunks = 4096, 64
			path := cufiletest.StandinFile(t, dir, "buf", slotSize*chunks, 0)
			a, err := b.Import(0, cufiletest.NameHandle("buf"))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			st := newTestStager(t, b, cufile.StagerConfig{SlotSize: slotSize, Slots: 8, Streams: 2})
			c, err := st.NewCopier()
			if err != nil {
				t.Fatal(err)
			}
			data := cufiletest.Pattern(slotSize*chunks, 7)
			seen := map[int]bool{}
			for i := range chunks {
				slot, err := acquireWithin(c, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				seen[staging.SlotIndex(c, slot)] = true
				copy(slot.Buf, data[i*slotSize:(i+1)*slotSize])
				if err := c.CopyAsync(slot, slotSize, a, uint64(i*slotSize)); err != nil {
					t.Fatal(err)
				}
				if tc.syncEach {
					if err := c.Sync(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if cufiletest.FileSum(t, path) != sha256.Sum256(data) {
				t.Fatal("destination differs from what was copied")
			}
			if len(seen) > tc.wantMaxDistinct {
				t.Fatalf("copier filled %d distinct slots, want at most %d", len(seen), tc.wantMaxDistinct)
			}
			// Every slot is back in the ring once the copier closed.
			var held []*cufile.Slot
			for range 8 {
				s, err := acquireWithin(st, time.Second)
				if err != nil {
					t.Fatalf("slot %d after Close: %v", len(held), err)
				}
				held = append(held, s)
			}
			staging.ReleaseAll(st)
		})
	}
}

// Copiers with slots of their own share a small ring with copies lagging
// behind: no slot is handed out twice and every byte lands.
func TestCopiersWithOwnSlotsShareARing(t *testing.T) {
	b, dir := standin(t)
	hoststandin.SlowCopies(b, 300*time.Microsecond)
	const workers, chunks, slotSize = 6, 30, 4096
	const region = chunks * slotSize
	path := cufiletest.StandinFile(t, dir, "buf", workers*region, 0)
	a, err := b.Import(0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// About a slot per worker: copiers wait on the ring.
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: slotSize, Slots: 7, Streams: 2})
	var holder [7]atomic.Int32
	want := make([]byte, workers*region)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 1; w <= workers; w++ {
		data := cufiletest.Pattern(region, uint64(w))
		copy(want[(w-1)*region:], data)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.NewCopier()
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if err := copySlotBySlot(c, holder[:], w, data, slotSize, a, uint64((w-1)*region)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if cufiletest.FileSum(t, path) != sha256.Sum256(want) {
		t.Fatal("destination differs from what was copied")
	}
}

// In the pool, copiers share a stream and a small ring with copies lagging
// behind. Each copier's Close waits for its own last copy, not the stream:
// its destination must hold every byte it copied the moment Close returns,
// while the others' copies are still queued on the same stream.
func TestPoolCopierCloseHasLandedItsOwnCopies(t *testing.T) {
	b, dir := standin(t)
	hoststandin.SlowCopies(b, 300*time.Microsecond)
	const workers, chunks, slotSize = 4, 24, 4096
	const region = chunks * slotSize
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: slotSize, Slots: 6, Streams: 1})
	var holder [6]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 1; w <= workers; w++ {
		name := fmt.Sprintf("buf%d", w)
		path := cufiletest.StandinFile(t, dir, name, region, 0)
		a, err := b.Import(0, cufiletest.NameHandle(name))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		data := cufiletest.Pattern(region, uint64(w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.NewCopier()
			if err != nil {
				errs <- err
				return
			}
			if err := copySlotBySlot(c, holder[:], w, data, slotSize, a, 0); err != nil {
				errs <- errors.Join(err, c.Close())
				return
			}
			if err := c.Close(); err != nil {
				errs <- err
				return
			}
			if cufiletest.FileSum(t, path) != sha256.Sum256(data) {
				errs <- fmt.Errorf("copier %d: destination differs from what it copied once Close returned", w)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// copySlotBySlot copies data to dst at off through c, a slot at a time,
// checking in holder (one entry per slot of the ring) that no slot is handed
// to copier w while another holds it.
func copySlotBySlot(c cufile.Copier, holder []atomic.Int32, w int, data []byte, slotSize int, dst cufile.Allocation, off uint64) error {
	for i := 0; i < len(data); i += slotSize {
		slot, err := acquireWithin(c, 10*time.Second)
		if err != nil {
			return err
		}
		idx := staging.SlotIndex(c, slot)
		if !holder[idx].CompareAndSwap(0, int32(w)) {
			return fmt.Errorf("slot %d handed to copier %d while copier %d holds it", idx, w, holder[idx].Load())
		}
		n := copy(slot.Buf[:slotSize], data[i:])
		holder[idx].Store(0)
		if err := c.CopyAsync(slot, n, dst, off+uint64(i)); err != nil {
			return err
		}
	}
	return nil
}

// pinFailer is a device whose pinning fails while fail is set.
type pinFailer struct {
	staging.Device
	fail   atomic.Bool
	pinned atomic.Int32 // allocations made
}

func (d *pinFailer) AllocHost(size int) ([]byte, error) {
	if d.fail.Load() {
		return nil, errors.New("injected: cannot pin")
	}
	d.pinned.Add(1)
	return d.Device.AllocHost(size)
}

// pinOnly is a device that pins host memory and copies nothing: enough
// for a ring whose slots are only taken and given back.
type pinOnly struct{}

func (pinOnly) Ordinal() int                       { return 0 }
func (pinOnly) Run(fn func() error) error          { return fn() }
func (pinOnly) AllocHost(size int) ([]byte, error) { return make([]byte, size), nil }
func (pinOnly) FreeHost([]byte) error              { return nil }
func (pinOnly) NewStream() (uintptr, error)        { return 1, nil }
func (pinOnly) DestroyStream(uintptr) error        { return nil }
func (pinOnly) NewFence() (uintptr, error)         { return 1, nil }
func (pinOnly) DestroyFence(uintptr) error         { return nil }
func (pinOnly) FenceDone(uintptr) (bool, error)    { return true, nil }
func (pinOnly) WaitFence(uintptr) error            { return nil }
func (pinOnly) SyncStream(uintptr) error           { return nil }
func (pinOnly) RecordFence(uintptr, uintptr) error { return nil }
func (pinOnly) AllocDevice(int) (cufile.Allocation, error) {
	return nil, errors.New("pinOnly has no device memory")
}
func (pinOnly) CopyAsync(uintptr, uintptr, []byte, cufile.Allocation, uint64, func(error)) error {
	return errors.New("pinOnly copies nothing")
}
func (pinOnly) CopyDtoDAsync(uintptr, cufile.Allocation, uint64, cufile.Allocation, uint64, uint64, func(error)) error {
	return errors.New("pinOnly copies nothing")
}
func (pinOnly) CopyDtoHAsync(uintptr, cufile.Allocation, uint64, []byte, func(error)) error {
	return errors.New("pinOnly copies nothing")
}

func smallChunks(t *testing.T, chunk int, pause time.Duration) {
	t.Cleanup(staging.SetGrowth(chunk, pause))
}

// The ring is pinned a chunk at a time as GETs need slots, never past its
// configured slots: a stager pins one chunk when made, the next only once
// every slot it has is out, and a ring at its size makes an acquirer wait.
func TestRingIsPinnedAsSlotsAreNeeded(t *testing.T) {
	smallChunks(t, 4<<10, time.Second) // four 1 KiB slots a chunk
	dev := &pinFailer{Device: pinOnly{}}
	s, err := staging.New(dev, cufile.StagerConfig{SlotSize: 1 << 10, Slots: 10, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Pinned(); got != 4<<10 {
		t.Fatalf("a new ring pinned %d bytes, want one chunk of 4096", got)
	}
	var held []*cufile.Slot
	for i, want := range []int64{4, 4, 4, 4, 8, 8, 8, 8, 10, 10} {
		slot, err := acquireWithin(s, time.Second)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		held = append(held, slot)
		if got := s.Pinned(); got != want<<10 {
			t.Fatalf("after %d slots the ring pinned %d bytes, want %d KiB", i+1, got, want)
		}
	}
	if n := dev.pinned.Load(); n != 3 {
		t.Errorf("%d allocations, want 3 (4 + 4 + the last 2 slots)", n)
	}
	if _, err := acquireWithin(s, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an 11th slot of a 10-slot ring: %v, want to wait", err)
	}
	staging.Release(s, held[3])
	slot, err := acquireWithin(s, time.Second)
	if err != nil || slot != held[3] {
		t.Fatalf("after a release: slot %p err %v, want the released slot %p", slot, err, held[3])
	}
	held[3] = slot
	for _, h := range held {
		staging.Release(s, h)
	}
	if got := s.Pinned(); got != 10<<10 {
		t.Errorf("released slots stay pinned: %d bytes, want 10 KiB", got)
	}
}

// Pinning that fails is not the caller's failure: the ring serves with
// the slots it has, and grows once pinning works again.
func TestRingThatCannotGrowServesWithWhatItHas(t *testing.T) {
	smallChunks(t, 2<<10, 20*time.Millisecond) // two 1 KiB slots a chunk
	dev := &pinFailer{Device: pinOnly{}}
	s, err := staging.New(dev, cufile.StagerConfig{SlotSize: 1 << 10, Slots: 8, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, _ := acquireWithin(s, time.Second)
	b, _ := acquireWithin(s, time.Second)
	dev.fail.Store(true)
	if _, err := acquireWithin(s, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third slot while pinning fails: %v, want to wait for one", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		staging.Release(s, a)
	}()
	c, err := acquireWithin(s, time.Second)
	if err != nil || c != a {
		t.Fatalf("while pinning fails a released slot serves: got %p err %v, want %p", c, err, a)
	}
	if got := s.Pinned(); got != 2<<10 {
		t.Fatalf("pinned %d bytes after failures, want the first chunk's 2048", got)
	}
	dev.fail.Store(false)
	time.Sleep(2 * staging.GrowPause())
	d, err := acquireWithin(s, time.Second)
	if err != nil {
		t.Fatalf("once pinning works again: %v", err)
	}
	if got := s.Pinned(); got != 4<<10 {
		t.Errorf("pinned %d bytes once pinning works again, want 4096", got)
	}
	for _, h := range []*cufile.Slot{b, c, d} {
		staging.Release(s, h)
	}
}

// Fill pins the rest of the ring at once, a chunk at a time, while the
// slots already pinned serve: after it no acquirer pins anything.
func TestFillPinsTheWholeRingWhileSlotsServe(t *testing.T) {
	smallChunks(t, 4<<10, time.Second) // four 1 KiB slots a chunk
	dev := &pinFailer{Device: pinOnly{}}
	s, err := staging.New(dev, cufile.StagerConfig{SlotSize: 1 << 10, Slots: 10, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	held := make([]*cufile.Slot, 0, 10)
	for range 2 {
		slot, err := acquireWithin(s, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, slot)
	}
	if err := s.Fill(context.Background()); err != nil {
		t.Fatalf("Fill: %v", err)
	}
	if got, n := s.Pinned(), dev.pinned.Load(); got != 10<<10 || n != 3 {
		t.Fatalf("after Fill %d bytes pinned in %d allocations, want 10 KiB in 3 (4 + 4 + 2)", got, n)
	}
	for range 8 {
		slot, err := acquireWithin(s, time.Second)
		if err != nil {
			t.Fatalf("slot %d of a filled ring: %v", len(held)+1, err)
		}
		held = append(held, slot)
	}
	if n := dev.pinned.Load(); n != 3 {
		t.Errorf("acquirers of a filled ring pinned more: %d allocations, want 3", n)
	}
	seen := map[*cufile.Slot]bool{}
	for _, h := range held {
		if seen[h] {
			t.Fatalf("slot %p handed out twice", h)
		}
		seen[h] = true
		staging.Release(s, h)
	}
	if err := s.Fill(context.Background()); err != nil || dev.pinned.Load() != 3 {
		t.Errorf("Fill of a full ring: %v, %d allocations; want nothing done", err, dev.pinned.Load())
	}
}

// A Fill that cannot pin says so and leaves the ring serving with what it
// has; the ring grows later as it would have.
func TestFillThatCannotPinLeavesTheRingServing(t *testing.T) {
	smallChunks(t, 2<<10, 20*time.Millisecond) // two 1 KiB slots a chunk
	dev := &pinFailer{Device: pinOnly{}}
	s, err := staging.New(dev, cufile.StagerConfig{SlotSize: 1 << 10, Slots: 8, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dev.fail.Store(true)
	err = s.Fill(context.Background())
	if err == nil || !strings.Contains(err.Error(), "pinning the staging ring (2048 of 8192 bytes pinned)") {
		t.Fatalf("Fill while pinning fails: %v, want an error saying how much is pinned", err)
	}
	a, err := acquireWithin(s, time.Second)
	if err != nil {
		t.Fatalf("a ring whose Fill failed does not serve: %v", err)
	}
	dev.fail.Store(false)
	time.Sleep(2 * staging.GrowPause())
	if err := s.Fill(context.Background()); err != nil || s.Pinned() != 8<<10 {
		t.Fatalf("Fill once pinning works: %v, %d bytes pinned, want all 8 KiB", err, s.Pinned())
	}
	staging.Release(s, a)
}

// A ring whose first chunk cannot be pinned is refused when made.
func TestRingThatCannotBePinnedIsRefused(t *testing.T) {
	dev := &pinFailer{Device: pinOnly{}}
	dev.fail.Store(true)
	if _, err := staging.New(dev, cufile.StagerConfig{SlotSize: 1 << 10, Slots: 8, Streams: 1}); err == nil {
		t.Fatal("a ring that cannot be pinned was made")
	}
}

// Copies into a buffer truncated under its mapping fail, and only the
// copier that made them hears of it: another request's copier on the same
// stream syncs clean with its bytes right, however the two interleave
// (one stream shared through the pool, or copiers cycling slots of their
// own, whose Sync drains the whole stream).
func TestCopyFailureIsReportedToItsCopierOnly(t *testing.T) {
	b, dir := standin(t)
	const slotSize, rounds = 4096, 40
	goodPath := cufiletest.StandinFile(t, dir, "good", 4*slotSize, 0)
	badPath := cufiletest.StandinFile(t, dir, "bad", 4*slotSize, 0)
	good, err := b.Import(0, cufiletest.NameHandle("good"))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	bad, err := b.Import(0, cufiletest.NameHandle("bad"))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := os.Truncate(badPath, 0); err != nil {
		t.Fatal(err)
	}
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: slotSize, Slots: 4, Streams: 1})
	for round := range rounds {
		cg, err := st.NewCopier()
		if err != nil {
			t.Fatal(err)
		}
		cb, err := st.NewCopier()
		if err != nil {
			t.Fatal(err)
		}
		data := cufiletest.Pattern(slotSize, uint64(round))
		send := func(c cufile.Copier, dst cufile.Allocation, off uint64, p []byte) {
			t.Helper()
			slot, err := c.AcquireSlot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			copy(slot.Buf, p)
			if err := c.CopyAsync(slot, len(p), dst, off); err != nil {
				t.Fatal(err)
			}
		}
		// The faulting copy first, so that it has failed by the
		// time the healthy copier syncs.
		send(cb, bad, 0, data)
		send(cb, bad, slotSize, data)
		send(cg, good, uint64(round%4)*slotSize, data)
		if err := cg.Sync(); err != nil {
			t.Fatalf("round %d: the healthy copier's Sync = %v", round, err)
		}
		if err := cb.Close(); !errors.Is(err, cufile.ErrBadHandle) {
			t.Fatalf("round %d: the faulting copier's Close = %v, want ErrBadHandle", round, err)
		}
		if err := cg.Close(); err != nil {
			t.Fatalf("round %d: the healthy copier's Close = %v", round, err)
		}
		got, err := os.ReadFile(goodPath)
		if err != nil {
			t.Fatal(err)
		}
		off := (round % 4) * slotSize
		if sha256.Sum256(got[off:off+slotSize]) != sha256.Sum256(data) {
			t.Fatalf("round %d: the healthy copier's bytes differ", round)
		}
	}
	if h, cp := st.Busy(); h != 0 || cp != 0 {
		t.Errorf("slots out of the ring: held %d copying %d", h, cp)
	}
}
