package rdmaread

import (
	"context"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

// The device's ring is pinned as its reads need slots, not whole at the
// first read, and the gauge says how much is pinned: nothing before a GPU
// read, one chunk after a read that needs a few slots of a 256 MiB ring.
func TestFirstReadPinsAChunkOfTheRingNotAllOfIt(t *testing.T) {
	const size = 4 << 20
	fe := newFlightEnv(t, size, Config{})
	fe.e.cfg.Staging = cufile.StagerConfig{SlotSize: 256 << 10, Slots: 1024, Streams: 2}
	pinned := func() float64 {
		t.Helper()
		families, err := fe.m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "s3gdsfs_gpu_staging_pinned_bytes" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no s3gdsfs_gpu_staging_pinned_bytes series")
		return 0
	}
	if got := pinned(); got != 0 {
		t.Fatalf("%v bytes pinned before any GPU read, want 0", got)
	}
	h := fe.buffer(t, "dst", size)
	if _, err := fe.e.Read(context.Background(), fe.request(h, 0, size, 0, "v1")); err != nil {
		t.Fatal(err)
	}
	if err := fe.check("dst", 0, size, 0); err != nil {
		t.Fatal(err)
	}
	if got := pinned(); got != 64<<20 {
		t.Fatalf("%v bytes pinned after one 4 MiB read, want one 64 MiB chunk of the 256 MiB ring", got)
	}
}
