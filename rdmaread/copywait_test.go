package rdmaread

import (
	"context"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
)

// A read's time blocked on device copies is counted once: the final sync is
// in the copier's WaitNanos, so adding Close's own duration counted it twice
// and s3gdsfs_gpu_copy_wait_seconds_total could exceed the reads' time.
// Each read below is one GET and one copier, copies slowed to copyDelay, so
// its copy wait lies between one copy's delay and the read's whole time.
func TestCopyWaitIsCountedOnce(t *testing.T) {
	const slot = 256 << 10 // flightEnv's slot size
	const copyDelay = 40 * time.Millisecond
	for _, c := range []struct {
		name  string
		share bool
		ahead bool
	}{{"one GET", false, false}, {"single flight", true, false}, {"from readahead", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			fe := newFlightEnv(t, 4<<20, Config{Share: c.share})
			fe.e.cfg.ReadAhead = 2 << 20
			hoststandin.SlowCopies(fe.backend, copyDelay)
			h := fe.buffer(t, "dst", 4<<20)
			var a *Ahead
			if c.ahead {
				a = NewAhead()
				defer a.Close()
				// Two reads in order open the window; the third finds its
				// slot fetched ahead.
				readInOrder(t, fe, a, h, 0, 2*slot, slot)
				deadline := time.Now().Add(5 * time.Second)
				for fe.counter(t, "s3gdsfs_gpu_read_ahead_bytes_total") < slot && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
			}
			off := int64(0)
			if c.ahead {
				off = 2 * slot
			}
			r := fe.request(h, off, slot, uint64(off), "v1")
			r.Ahead = a
			before := fe.counter(t, "s3gdsfs_gpu_copy_wait_seconds_total")
			start := time.Now()
			res, err := fe.e.Read(context.Background(), r)
			took := time.Since(start)
			if err != nil || res.Bytes != slot {
				t.Fatalf("read: %+v, %v", res, err)
			}
			if c.ahead && fe.counter(t, "s3gdsfs_gpu_read_ahead_served_bytes_total") < slot {
				t.Fatalf("the read was not served from readahead")
			}
			wait := time.Duration((fe.counter(t, "s3gdsfs_gpu_copy_wait_seconds_total") - before) * float64(time.Second))
			if wait < copyDelay/2 || wait > took {
				t.Errorf("copy wait %v for a read of %v with copies of %v: want between %v and the read's time", wait, took, copyDelay, copyDelay/2)
			}
		})
	}
}
