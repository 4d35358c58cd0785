package cuda

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

// Bytes copied host to device come back byte for byte through
// cuMemcpyDtoHAsync into held slots, slot by slot; a range past the
// allocation is refused before anything is enqueued.
func TestCUDACopyFromDeviceIsByteExact(t *testing.T) {
	b := gpu(t)
	const size, off = 6<<20 + 5, 4097
	a := deviceAlloc(t, b, size, 0xa5)
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 1 << 20, Slots: 3, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	data := cufiletest.Pattern(5<<20+3, 9)
	if err := cufiletest.CopyThrough(t, st, a, off, data).Close(); err != nil {
		t.Fatal(err)
	}

	c, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := bytes.Repeat([]byte{0xa5}, size)
	copy(want[off:], data)
	var got []byte
	for pos := uint64(0); pos < size; {
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := int(min(uint64(len(slot.Buf)), size-pos))
		if err := c.CopyFromDeviceAsync(a, pos, slot, n); err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(); err != nil {
			t.Fatal(err)
		}
		got = append(got, slot.Buf[:n]...)
		c.ReleaseSlot(slot)
		pos += uint64(n)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes copied from the device differ from those copied to it")
	}
	slot, err := c.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.ReleaseSlot(slot)
	if err := c.CopyFromDeviceAsync(a, size-10, slot, 11); !errors.Is(err, cufile.ErrOutOfRange) {
		t.Errorf("copy past the allocation: %v, want ErrOutOfRange", err)
	}
	if err := c.CopyFromDeviceAsync(cufiletest.FakeAllocation{Dev: 0, Len: 100}, 0, slot, 1); !errors.Is(err, cufile.ErrBadHandle) {
		t.Errorf("copy from another kind of allocation: %v, want ErrBadHandle", err)
	}
}
