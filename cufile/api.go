package cufile

import (
	"context"
	"errors"
	"math"

	"github.com/s3gdsfs/s3gdsfs/internal/setting"
)

// Handle is the 64-byte CUDA IPC memory handle (cuIpcMemHandle) of a device
// allocation's base, as exported by the caller's process.
type Handle [64]byte

// DeviceInfo describes one device.
type DeviceInfo struct {
	Ordinal  int
	Name     string
	TotalMem uint64 // bytes
	// PCIBusID is the device's PCI address as the driver gives it
	// (cuDeviceGetPCIBusId, "0000:1B:00.0"); "" where there is none (the
	// host stand-in). Ordinals are the daemon's: a process whose
	// CUDA_VISIBLE_DEVICES (or container) shows it fewer devices numbers
	// them otherwise, and finds its own by this address.
	PCIBusID string
}

// Sentinel errors; every error this package returns for these conditions
// wraps one of them (test with errors.Is).
var (
	// ErrNoDriver: the CUDA driver library is missing or unusable.
	ErrNoDriver = errors.New("cufile: no CUDA driver")
	// ErrNoDevice: no such device, or the allocation is on another device.
	ErrNoDevice = errors.New("cufile: no such device")
	// ErrBadHandle: the handle cannot be imported, or the allocation is closed.
	ErrBadHandle = errors.New("cufile: bad memory handle")
	// ErrOutOfRange: a copy would run past the allocation or the slot.
	ErrOutOfRange = errors.New("cufile: copy out of range")
	// ErrClosed: the stager or copier has been closed.
	ErrClosed = errors.New("cufile: closed")
)

// Backend is the CUDA layer as the GPU read engine sees it.
type Backend interface {
	// Name is "cuda" or "host-standin".
	Name() string
	// Devices lists the devices; the first call initialises the driver.
	Devices() ([]DeviceInfo, error)
	// Import opens the allocation behind h on device. Each Import needs
	// its own Close. Use an ImportCache to share imports between requests.
	Import(device int, h Handle) (Allocation, error)
	// NewStager allocates a device's ring of pinned slots and its copy
	// streams. Make one per device and keep it for the daemon's life.
	NewStager(device int, cfg StagerConfig) (Stager, error)
}

// CallerImporter is a Backend whose buffers belong to users: ImportAs
// imports one only for the uid that may write it. An ImportCache over such a
// backend shares an import between requests of one uid only.
type CallerImporter interface {
	ImportAs(device int, h Handle, uid uint32) (Allocation, error)
}

// Allocation is an imported device allocation.
type Allocation interface {
	Device() int
	// Size is the allocation's real extent from its base, in bytes.
	Size() uint64
	// Close unmaps the allocation. Copies into it must have completed.
	Close() error
}

// StagerConfig sizes a stager. Every field must be set: the GPU engine's
// configuration holds the defaults (rdmaread.DefaultConfig).
type StagerConfig struct {
	SlotSize int // bytes per pinned slot
	Slots    int // slots in the ring
	Streams  int // copy streams
}

// Validate refuses a size the ring cannot have, naming the field.
func (c StagerConfig) Validate() error {
	switch {
	case c.SlotSize < 1:
		return setting.Refuse("SlotSize", c.SlotSize, "at least 1 byte")
	case c.Slots < 1:
		return setting.Refuse("Slots", c.Slots, "at least 1")
	case c.Streams < 1:
		return setting.Refuse("Streams", c.Streams, "at least 1")
	case c.SlotSize > math.MaxInt/c.Slots:
		return setting.Refuse("Slots", c.Slots, "slots of %d bytes overflow", c.SlotSize)
	}
	return nil
}

// Slot is one pinned host buffer of a stager's ring. Buf is valid from
// AcquireSlot until the slot is handed to CopyAsync or ReleaseSlot. The
// stager keeps the slot's state itself: a Slot it did not hand out is
// refused.
type Slot struct {
	Buf []byte
}

// SlotCopy is one piece of a slot copied to a destination:
// slot.Buf[Off:Off+N] to Dst at DstOff.
type SlotCopy struct {
	Off    int
	N      int
	Dst    Allocation
	DstOff uint64
}

// CopyError is the asynchronous failure of one copy into Dst. It is
// reported by the Sync (or Close) of the copier that enqueued the copy and
// by no other: a request whose buffer faults does not fail the requests
// whose copies share its stream. Copies of one copier into several
// destinations (CopyAsyncMany) say which destination failed.
type CopyError struct {
	Dst Allocation
	Err error
}

func (e *CopyError) Error() string { return e.Err.Error() }
func (e *CopyError) Unwrap() error { return e.Err }

// Stager owns a device's slot ring and copy streams. Its methods are safe
// for concurrent use.
type Stager interface {
	// AcquireSlot returns a free slot, reclaiming slots whose copies have
	// completed; it blocks while every slot is held or being copied.
	AcquireSlot(ctx context.Context) (*Slot, error)
	// TryAcquireSlot is AcquireSlot that never waits for a copy: it
	// returns a free slot (reclaiming completed copies, pinning the ring's
	// next chunk where it has room) or nil when none is free now. Work
	// that may do without a slot (reading ahead) takes slots this way,
	// so that it never queues in front of a read.
	TryAcquireSlot() *Slot
	// ReleaseSlot gives back a slot taken with AcquireSlot or
	// TryAcquireSlot that will not be copied (a held slot's holder may
	// keep it filled as long as it likes).
	ReleaseSlot(slot *Slot)
	// NewCopier starts a request's ordered sequence of copies on one of
	// the stager's streams (the least used; streams are shared when there
	// are more requests than streams). It never blocks.
	NewCopier() (Copier, error)
	// Busy counts the slots out of the ring now: held by callers (being
	// filled) and being copied.
	Busy() (held, copying int)
	// Pinned is the host memory the ring has pinned so far: it grows in
	// chunks as GETs need slots, up to the configured slots, or at once
	// with Fill.
	Pinned() int64
	// Fill pins the rest of the ring now, each chunk usable as soon as it
	// is in; it returns the error of a chunk that could not be pinned (the
	// ring then serves with what it has).
	Fill(ctx context.Context) error
	// Close waits for outstanding copies and frees the slots and streams.
	// It fails, leaving the stager usable, while slots are held by callers
	// or copiers are open.
	Close() error
}

// Copier is one request's sequence of copies. It is not safe for concurrent
// use; the stager it came from is.
type Copier interface {
	// AcquireSlot is Stager.AcquireSlot, counting time spent waiting for
	// copies to complete in WaitNanos.
	AcquireSlot(ctx context.Context) (*Slot, error)
	// CopyAsync enqueues a copy of slot.Buf[:n] to dst at dstOff. It takes
	// the slot in every case: the slot returns to the ring once the copy
	// has completed, or at once when the copy is refused (dstOff+n past
	// dst.Size(): ErrOutOfRange, nothing enqueued).
	CopyAsync(slot *Slot, n int, dst Allocation, dstOff uint64) error
	// CopyAsyncMany enqueues copies of pieces of one slot to several
	// destinations and takes the slot in every case: it returns to the
	// ring once the last copy has completed. A refused piece gets its
	// error at its index; the others are enqueued.
	CopyAsyncMany(slot *Slot, pieces []SlotCopy) []error
	// CopyHeldAsync enqueues a copy of slot.Buf[off:off+n] to dst at
	// dstOff and leaves the slot with its holder, filled: its bytes may be
	// copied again, by this copier or another. The holder may refill or
	// release the slot only once the Sync (or Close) of every copier that
	// copied from it has returned.
	CopyHeldAsync(slot *Slot, off, n int, dst Allocation, dstOff uint64) error
	// CopyDeviceAsync enqueues a device-to-device copy on the copier's
	// stream, ordered after the copies enqueued before it.
	CopyDeviceAsync(src Allocation, srcOff uint64, dst Allocation, dstOff uint64, n int64) error
	// CopyFromDeviceAsync enqueues a device-to-host copy of n bytes of
	// src at srcOff into slot.Buf[:n] (a slot held from AcquireSlot),
	// ordered after the copies enqueued before it. The slot stays with its
	// holder; its bytes are there once Sync has returned without error.
	CopyFromDeviceAsync(src Allocation, srcOff uint64, slot *Slot, n int) error
	// Drain waits for every copy enqueued on the copier's stream so far.
	// Unlike Sync it may run beside the copier's other methods (not
	// Close), and an asynchronous copy failure it sees is kept for the
	// next Sync.
	Drain() error
	// ReleaseSlot gives back a slot that will not be copied.
	ReleaseSlot(slot *Slot)
	// Sync waits for every copy this copier enqueued; once it returns the
	// bytes are visible to the device's next kernel. It reports the
	// failures of this copier's copies only (a *CopyError names the
	// destination), each once.
	Sync() error
	// Close syncs, then returns the stream to the stager.
	Close() error
	// WaitNanos is the total time this copier spent blocked on copies
	// (in Sync and in AcquireSlot), for reporting how well copies overlap.
	WaitNanos() int64
}
