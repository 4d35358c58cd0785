package staging_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/cufile/staging"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

// linkCounter is the stand-in's device, counting what crosses the host
// link (bytes copied from slots) and the device-to-device copies; with
// noDeviceMemory it has none of its own to give.
type linkCounter struct {
	staging.Device
	hostBytes, deviceCopies atomic.Int64
	noDeviceMemory          bool
	// enqueueDelay slows each enqueue of a copy from a slot, as a busy
	// driver would: other copiers act meanwhile.
	enqueueDelay time.Duration
}

func (d *linkCounter) CopyAsync(stream, fence uintptr, src []byte, dst cufile.Allocation, dstOff uint64, fault func(error)) error {
	d.hostBytes.Add(int64(len(src)))
	time.Sleep(d.enqueueDelay)
	return d.Device.CopyAsync(stream, fence, src, dst, dstOff, fault)
}

func (d *linkCounter) CopyDtoDAsync(stream uintptr, src cufile.Allocation, srcOff uint64, dst cufile.Allocation, dstOff uint64, n uint64, fault func(error)) error {
	d.deviceCopies.Add(1)
	return d.Device.CopyDtoDAsync(stream, src, srcOff, dst, dstOff, n, fault)
}

func (d *linkCounter) AllocDevice(size int) (cufile.Allocation, error) {
	if d.noDeviceMemory {
		return nil, errors.New("injected: no device memory")
	}
	return d.Device.AllocDevice(size)
}

// A slot copied to several destinations crosses the host link once, into
// a device buffer of the daemon's own, and reaches each destination from
// there; a destination whose copy faults fails alone. Where the device
// has no memory to give, each destination gets its copy from the slot:
// the same bytes, the link crossed once per destination.
func TestSlotForSeveralDestinationsCrossesTheLinkOnce(t *testing.T) {
	for _, noMem := range []bool{false, true} {
		b, dir := standin(t)
		const slotSize = 4096
		var allocs []cufile.Allocation
		for _, name := range []string{"a", "b", "c", "bad"} {
			cufiletest.StandinFile(t, dir, name, 2*slotSize, 0xee)
			a, err := b.Import(0, cufiletest.NameHandle(name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			allocs = append(allocs, a)
		}
		if err := os.Truncate(filepath.Join(dir, "bad"), 0); err != nil {
			t.Fatal(err)
		}
		dev := &linkCounter{Device: hoststandin.NewDevice(0), noDeviceMemory: noMem}
		st, err := staging.New(dev, cufile.StagerConfig{SlotSize: slotSize, Slots: 2, Streams: 1})
		if err != nil {
			t.Fatal(err)
		}
		data := cufiletest.Pattern(slotSize, 9)
		c, err := st.NewCopier()
		if err != nil {
			t.Fatal(err)
		}
		for round := range 3 { // more rounds than slots: twins are taken again
			slot, err := c.AcquireSlot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			copy(slot.Buf, data)
			errs := c.CopyAsyncMany(slot, []cufile.SlotCopy{
				{Off: 0, N: slotSize, Dst: allocs[0], DstOff: 0},
				{Off: 1000, N: 96, Dst: allocs[1], DstOff: uint64(round) * 100},
				{Off: 0, N: slotSize, Dst: allocs[2], DstOff: slotSize},
				{Off: 0, N: slotSize, Dst: allocs[3], DstOff: 0},
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("piece %d refused: %v", i, err)
				}
			}
			err = c.Sync()
			var ce *cufile.CopyError
			if !errors.As(err, &ce) || ce.Dst != allocs[3] {
				t.Fatalf("round %d: Sync says %v, want the truncated destination's failure alone", round, err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		read := func(name string) []byte {
			buf, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			return buf
		}
		if got := read("a"); !bytes.Equal(got[:slotSize], data) || got[slotSize] != 0xee {
			t.Errorf("no device memory %v: a has the wrong bytes", noMem)
		}
		if got := read("b"); !bytes.Equal(got[200:296], data[1000:1096]) || got[296] != 0xee {
			t.Errorf("no device memory %v: b has the wrong bytes", noMem)
		}
		if got := read("c"); !bytes.Equal(got[slotSize:], data) || got[slotSize-1] != 0xee {
			t.Errorf("no device memory %v: c has the wrong bytes", noMem)
		}
		host, dtod := dev.hostBytes.Load(), dev.deviceCopies.Load()
		if noMem {
			if host != 3*(3*slotSize+96) || dtod != 0 {
				t.Errorf("without device memory: %d bytes over the link and %d device copies, want %d and 0", host, dtod, 3*(3*slotSize+96))
			}
			continue
		}
		if host != 3*slotSize || dtod != 3*4 {
			t.Errorf("%d bytes over the link and %d device copies, want %d (one slot a round) and 12", host, dtod, 3*slotSize)
		}
	}
}

// Copiers on several streams taking a few twins in turn each land their
// own bytes: a twin is never handed to a second copier while its first
// copies are still being enqueued or are under way.
func TestTwinsTakenInTurnKeepEachCopiersBytes(t *testing.T) {
	t.Cleanup(staging.SetMaxTwins(2))
	b, dir := standin(t)
	const slotSize, copiers, rounds = 1024, 6, 30
	dsts := make([][2]cufile.Allocation, copiers)
	for i := range copiers {
		for j := range 2 {
			name := string(rune('a'+i)) + string(rune('0'+j))
			cufiletest.StandinFile(t, dir, name, slotSize, 0)
			a, err := b.Import(0, cufiletest.NameHandle(name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			dsts[i][j] = a
		}
	}
	dev := &linkCounter{Device: hoststandin.NewDevice(50 * time.Microsecond), enqueueDelay: 200 * time.Microsecond}
	st, err := staging.New(dev, cufile.StagerConfig{SlotSize: slotSize, Slots: 2 * copiers, Streams: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var wg sync.WaitGroup
	errs := make(chan error, copiers)
	for i := range copiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.NewCopier()
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for round := range rounds {
				data := cufiletest.Pattern(slotSize, uint64(i*1000+round))
				slot, err := c.AcquireSlot(context.Background())
				if err != nil {
					errs <- err
					return
				}
				copy(slot.Buf, data)
				for _, err := range c.CopyAsyncMany(slot, []cufile.SlotCopy{
					{Off: 0, N: slotSize, Dst: dsts[i][0]}, {Off: 0, N: slotSize, Dst: dsts[i][1]}}) {
					if err != nil {
						errs <- err
						return
					}
				}
				if err := c.Sync(); err != nil {
					errs <- err
					return
				}
				for j := range 2 {
					got, err := os.ReadFile(filepath.Join(dir, string(rune('a'+i))+string(rune('0'+j))))
					if err != nil || !bytes.Equal(got, data) {
						errs <- fmt.Errorf("copier %d round %d: destination %d has another copier's bytes (%v)", i, round, j, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if dtod := dev.deviceCopies.Load(); dtod == 0 {
		t.Fatal("no copy went through a twin")
	}
}
