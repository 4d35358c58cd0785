package cuda

import (
	"context"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

// On a real device, slots copied to several destinations through the
// stager's twins (one host-to-device copy, then device to device) land
// byte-exact in each, round after round, the twins taken again.
func TestCUDASlotForSeveralDestinationsIsByteExact(t *testing.T) {
	b := gpu(t)
	const slot, rounds = 1 << 20, 6
	size := uint64(rounds * slot)
	dsts := []*cudaAllocation{deviceAlloc(t, b, size, 0x11), deviceAlloc(t, b, size+4096, 0x22), deviceAlloc(t, b, size, 0x33)}
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: slot, Slots: 2, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	data := cufiletest.Pattern(rounds*slot, 13)
	for r := range rounds {
		s, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		copy(s.Buf, data[r*slot:(r+1)*slot])
		at := uint64(r * slot)
		for i, err := range c.CopyAsyncMany(s, []cufile.SlotCopy{
			{Off: 0, N: slot, Dst: dsts[0], DstOff: at},
			{Off: 0, N: slot, Dst: dsts[1], DstOff: at + 4096},
			{Off: 0, N: slot, Dst: dsts[2], DstOff: at},
		}) {
			if err != nil {
				t.Fatalf("round %d, piece %d: %v", r, i, err)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][32]byte{expectedSum(int(size), 0x11, 0, data), expectedSum(int(size)+4096, 0x22, 4096, data), expectedSum(int(size), 0x33, 0, data)} {
		got, err := deviceSum(dsts[i].dev, dsts[i].ptr, dsts[i].size)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("destination %d: device bytes differ from what was copied", i)
		}
	}
}
