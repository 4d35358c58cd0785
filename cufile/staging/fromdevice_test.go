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

// A device-to-host copy lands the allocation's bytes in a held slot, is
// refused past the allocation before anything is enqueued, and leaves the
// slot held; a buffer that faults fails the copier's Sync.
func TestCopyFromDeviceAsync(t *testing.T) {
	b, dir := standin(t)
	st := newTestStager(t, b, cufile.StagerConfig{SlotSize: 1 << 10, Slots: 2, Streams: 1})
	data := cufiletest.Pattern(3000, 5)
	path := cufiletest.StandinFile(t, dir, "src", 3000, 0)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := b.Import(0, cufiletest.NameHandle("src"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	slot, err := c.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		off uint64
		n   int
	}{{3000 - 10, 11}, {3001, 0}, {0, 1<<10 + 1}} {
		if err := c.CopyFromDeviceAsync(a, bad.off, slot, bad.n); !errors.Is(err, cufile.ErrOutOfRange) {
			t.Errorf("copy of %d bytes at %d: %v, want ErrOutOfRange", bad.n, bad.off, err)
		}
	}
	if err := c.CopyFromDeviceAsync(a, 2000, slot, 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(slot.Buf[:1000], data[2000:]) {
		t.Fatal("slot bytes differ from the allocation's")
	}
	if h, _ := st.Busy(); h != 1 {
		t.Fatalf("%d slots held after the copy, want 1 (left with its holder)", h)
	}
	// The buffer cut short under its mapping: the copy faults.
	if err := os.Truncate(filepath.Join(dir, "src"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyFromDeviceAsync(a, 2048, slot, 100); err != nil {
		t.Fatal(err)
	}
	err = c.Sync()
	var ce *cufile.CopyError
	if !errors.Is(err, cufile.ErrBadHandle) || !errors.As(err, &ce) || ce.Dst != a {
		t.Fatalf("Sync after a faulting copy = %v; want a CopyError naming the buffer", err)
	}
	c.ReleaseSlot(slot)
}
