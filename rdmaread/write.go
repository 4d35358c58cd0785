package rdmaread

import (
	"context"
	"errors"
	"fmt"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
)

// WriteRequest is one GPU write: Length bytes of the caller's buffer from
// SrcOffset, copied to the host and handed on in order.
type WriteRequest struct {
	Length    int64
	Device    int
	Handle    cufile.Handle // CUDA IPC handle of the allocation's base
	SrcOffset uint64        // where in the allocation the bytes are
	Owner     int           // the caller's process, which holds the import
	UID       uint32        // the caller's user: the host stand-in reads only its files
}

// Write copies the request's range of the caller's buffer device to host
// into pinned slots of the device's ring, one slot at a time, and hands
// each slot's bytes to sink in order; the copy of the next slot runs while
// sink takes the last. It returns how many bytes sink took. sink's error
// is returned as it is, after the bytes it took; the error of a copy
// stops the write before its bytes reach sink.
func (e *Engine) Write(ctx context.Context, r WriteRequest, sink func([]byte) (int, error)) (int64, error) {
	if r.Length < 0 {
		return 0, fmt.Errorf("%w: negative length", abi.ErrInvalid)
	}
	alloc, err := e.imports.AcquireAs(r.Owner, r.UID, r.Device, r.Handle)
	if err != nil {
		return 0, err
	}
	defer e.imports.Put(alloc)
	if r.SrcOffset > alloc.Size() || uint64(r.Length) > alloc.Size()-r.SrcOffset {
		return 0, fmt.Errorf("%w: %d bytes at offset %d of a %d-byte allocation", mint.ErrOutOfBounds, r.Length, r.SrcOffset, alloc.Size())
	}
	if r.Length == 0 {
		return 0, nil
	}
	stager, err := e.stager(r.Device)
	if err != nil {
		return 0, err
	}
	copier, err := stager.NewCopier()
	if err != nil {
		return 0, err
	}
	var held []*cufile.Slot
	defer func() {
		// Close waits for a copy still under way before its slot goes back.
		copier.Close()
		for _, s := range held {
			copier.ReleaseSlot(s)
		}
	}()
	// fill takes a slot and enqueues the copy of the range's bytes at off
	// into it. Without wait it takes only a slot free now, or none (nil): a
	// ring of one slot, or one the reads hold, must not keep a write that
	// holds a slot waiting for another.
	fill := func(off int64, wait bool) (*cufile.Slot, int, error) {
		var slot *cufile.Slot
		if wait {
			var err error
			if slot, err = copier.AcquireSlot(ctx); err != nil {
				return nil, 0, err
			}
		} else if slot = stager.TryAcquireSlot(); slot == nil {
			return nil, 0, nil
		}
		held = append(held, slot)
		n := int(min(int64(len(slot.Buf)), r.Length-off))
		return slot, n, copier.CopyFromDeviceAsync(alloc, r.SrcOffset+uint64(off), slot, n)
	}
	var done int64
	slot, n, err := fill(0, true)
	for err == nil {
		if err = copier.Sync(); err != nil {
			break
		}
		cur, k := slot, n
		slot = nil
		if next := done + int64(k); next < r.Length {
			// The device copies the next slot while sink takes this one.
			slot, n, err = fill(next, false)
		}
		took, serr := sink(cur.Buf[:k])
		done += int64(took)
		held = dropSlot(held, cur)
		copier.ReleaseSlot(cur)
		if serr != nil {
			return done, &sinkError{serr}
		}
		if took < k {
			return done, &sinkError{errors.New("the writer took fewer bytes than given")}
		}
		if done == r.Length {
			break
		}
		if err == nil && slot == nil {
			slot, n, err = fill(done, true)
		}
	}
	return done, err
}

// sinkError is the error of a write's sink, returned as the sink made it.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

// SinkError returns the error a write's sink made, if err is one.
func SinkError(err error) (error, bool) {
	var s *sinkError
	if errors.As(err, &s) {
		return s.err, true
	}
	return nil, false
}

func dropSlot(held []*cufile.Slot, s *cufile.Slot) []*cufile.Slot {
	for i, h := range held {
		if h == s {
			return append(held[:i], held[i+1:]...)
		}
	}
	return held
}
