package cufile

import (
	"context"
	"errors"
	"io"
)

// CopyFrom copies n bytes of r into dst at dstOff through one copier of
// stager: each slot is copied to the device while the next one fills. It
// returns once every enqueued copy has completed, with the number of bytes
// enqueued; on an error, the copies already enqueued have completed too.
func CopyFrom(ctx context.Context, stager Stager, r io.Reader, n int64, dst Allocation, dstOff uint64) (int64, error) {
	copier, err := stager.NewCopier()
	if err != nil {
		return 0, err
	}
	var done int64
	for done < n {
		slot, err := copier.AcquireSlot(ctx)
		if err != nil {
			return done, errors.Join(err, copier.Close())
		}
		k := min(int64(len(slot.Buf)), n-done)
		if _, err := io.ReadFull(r, slot.Buf[:k]); err != nil {
			copier.ReleaseSlot(slot)
			return done, errors.Join(err, copier.Close())
		}
		if err := copier.CopyAsync(slot, int(k), dst, dstOff+uint64(done)); err != nil {
			return done, errors.Join(err, copier.Close())
		}
		done += k
	}
	return done, copier.Close() // Close synchronises the stream
}
