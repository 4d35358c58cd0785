package staging_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

// One slot filled once lands in several destinations, a refused piece
// leaves the others alone, and a device-to-device copy on the same stream
// sees the bytes the copies before it landed.
func TestCopyAsyncManyAndDeviceCopy(t *testing.T) {
	b, dir := standin(t)
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 1 << 10, Slots: 2, Streams: 1})
	var allocs []cufile.Allocation
	for _, name := range []string{"a", "b", "c", "small"} {
		size := 4 << 10
		if name == "small" {
			size = 100
		}
		cufiletest.StandinFile(t, dir, name, size, 0xee)
		a, err := b.Import(0, cufiletest.NameHandle(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		allocs = append(allocs, a)
	}
	data := cufiletest.Pattern(1<<10, 3)
	c, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	slot, err := c.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	copy(slot.Buf, data)
	errs := c.CopyAsyncMany(slot, []cufile.SlotCopy{
		{Off: 0, N: 1 << 10, Dst: allocs[0], DstOff: 0},
		{Off: 512, N: 512, Dst: allocs[1], DstOff: 100},
		{Off: 0, N: 1 << 10, Dst: allocs[3], DstOff: 0}, // past the end: refused
	})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], cufile.ErrOutOfRange) {
		t.Fatalf("errors %v", errs)
	}
	// a's first KiB, as landed by the copy above, copied on to c.
	if err := c.CopyDeviceAsync(allocs[0], 0, allocs[2], 1000, 1<<10); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDeviceAsync(allocs[0], 0, allocs[2], 4000, 1<<10); !errors.Is(err, cufile.ErrOutOfRange) {
		t.Errorf("device copy past the end: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		buf, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return buf
	}
	if got := read("a"); !bytes.Equal(got[:1<<10], data) || got[1<<10] != 0xee {
		t.Error("a: wrong bytes")
	}
	if got := read("b"); !bytes.Equal(got[100:612], data[512:]) || got[99] != 0xee || got[612] != 0xee {
		t.Error("b: wrong bytes")
	}
	if got := read("c"); !bytes.Equal(got[1000:2024], data) || got[999] != 0xee || got[2024] != 0xee {
		t.Error("c: wrong bytes")
	}
	if !bytes.Equal(read("small"), bytes.Repeat([]byte{0xee}, 100)) {
		t.Error("small: written to")
	}
	if h, cp := st.Busy(); h != 0 || cp != 0 {
		t.Errorf("slots out of the ring: held %d copying %d", h, cp)
	}
}
