package cuda

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// copyThrough copies data into dst at off through st, slot by slot, the way
// the read engine does.
func copyThrough(t *testing.T, st cufile.Stager, dst cufile.Allocation, off uint64, data []byte) cufile.Copier {
	t.Helper()
	c, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 {
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := copy(slot.Buf, data)
		if err := c.CopyAsync(slot, n, dst, off); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
		off += uint64(n)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	return c
}

type fakeAllocation struct {
	device int
	size   uint64
}

func (f fakeAllocation) Device() int  { return f.device }
func (f fakeAllocation) Size() uint64 { return f.size }
func (f fakeAllocation) Close() error { return nil }
