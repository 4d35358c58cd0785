package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/cuda"
)

// deviceSink lands GET bodies in device memory the way the daemon's GPU
// path does, without the daemon: each body is read into pinned slots of a
// stager in the engine's shape (by default the daemon's: a pool of 4 MiB
// slots shared by every GET, 8 copy streams) and each slot is copied to the
// worker's own device buffer. With copy off the slots are filled and given
// back: the pinned destination alone.
type deviceSink struct {
	stager   cufile.Stager
	bufs     []cufile.Allocation // one per worker
	toDevice bool
}

const deviceSlotSize = 4 << 20

// stagingShape is the stager's shape, so that the design's bound can be
// measured at other shapes than the daemon's.
type stagingShape struct {
	slotSize, copyStreams int
}

func (s stagingShape) check() error {
	switch {
	case s.slotSize < 64<<10 || s.slotSize > 1<<30:
		return fmt.Errorf("--slot-size %d: between 65536 and 1073741824 bytes", s.slotSize)
	case s.copyStreams < 1 || s.copyStreams > 1024:
		return fmt.Errorf("--copy-streams %d: from 1 to 1024", s.copyStreams)
	}
	return nil
}

func newDeviceSink(device, workers int, bufSize int64, toDevice bool, shape stagingShape) (*deviceSink, error) {
	backend, err := cuda.New()
	if err != nil {
		return nil, fmt.Errorf("--device %d: %w", device, err)
	}
	// One pool, as the daemon's: four slots per GET in flight, and a
	// few to spare.
	const perGet = 4
	st, err := backend.NewStager(device, cufile.StagerConfig{
		SlotSize: shape.slotSize, Slots: perGet*workers + 8, Streams: shape.copyStreams,
	})
	if err != nil {
		return nil, fmt.Errorf("--device %d: %w", device, err)
	}
	s := &deviceSink{stager: st, toDevice: toDevice}
	// A ring is pinned as it is used; pin all of it before the clock
	// starts, as it is in a daemon that has been serving.
	if err := pinAll(st, perGet*workers+8); err != nil {
		return nil, errors.Join(fmt.Errorf("--device %d: %w", device, err), st.Close())
	}
	for range workers {
		a, err := cuda.AllocDevice(backend, device, uint64(bufSize))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("--device %d: %d bytes per worker: %w", device, bufSize, err), s.Close())
		}
		s.bufs = append(s.bufs, a)
	}
	return s, nil
}

// read reads r to the end into worker w's device buffer and returns once
// every copy has landed.
func (s *deviceSink) read(w int, r io.Reader) (int64, error) {
	copier, err := s.stager.NewCopier()
	if err != nil {
		return 0, err
	}
	dst := s.bufs[w]
	var n int64
	for {
		slot, err := copier.AcquireSlot(context.Background())
		if err != nil {
			return n, errors.Join(err, copier.Close())
		}
		m, rerr := io.ReadFull(r, slot.Buf)
		switch {
		case m == 0 || !s.toDevice:
			copier.ReleaseSlot(slot)
		case uint64(n)+uint64(m) > dst.Size():
			copier.ReleaseSlot(slot)
			return n, errors.Join(fmt.Errorf("object larger than the %d-byte device buffer", dst.Size()), copier.Close())
		default:
			if err := copier.CopyAsync(slot, m, dst, uint64(n)); err != nil {
				return n, errors.Join(err, copier.Close())
			}
		}
		n += int64(m)
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return n, copier.Close()
		}
		if rerr != nil {
			return n, errors.Join(rerr, copier.Close())
		}
	}
}

func (s *deviceSink) Close() error {
	var errs []error
	for _, a := range s.bufs {
		errs = append(errs, a.Close())
	}
	return errors.Join(append(errs, s.stager.Close())...)
}

// pinAll takes every slot of the ring once and gives them back.
func pinAll(st cufile.Stager, slots int) error {
	c, err := st.NewCopier()
	if err != nil {
		return err
	}
	var held []*cufile.Slot
	for range slots {
		var slot *cufile.Slot
		if slot, err = c.AcquireSlot(context.Background()); err != nil {
			break
		}
		held = append(held, slot)
	}
	for _, slot := range held {
		c.ReleaseSlot(slot)
	}
	return errors.Join(err, c.Close())
}
