// Package cuda is the daemon's runtime binding to the CUDA driver, a
// cufile.Backend: it imports a caller's device allocation from its CUDA IPC
// handle and stages copies into it through package staging.
//
// The driver (libcuda.so.1) is opened with dlopen through purego rather than
// linked with cgo, so the daemon builds with CGO_ENABLED=0 and starts on hosts
// without a GPU; CUDA itself (cuInit, the primary contexts) is initialised
// only when the first GPU request arrives, since that is a pause a mount
// that never serves a GPU read should not make, and costs a context's worth
// of device memory per GPU (docs/benchmarks.md, "What was not measured").
//
// Threading rule: CUDA's current context belongs to an OS thread, not to a
// goroutine. Every batch of driver calls for a device runs on a goroutine
// locked to its thread with that device's primary context made current
// first; callers of this package need not care which goroutine they are on.
package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/staging"
)

// cudaLibrary is the driver's soname; the unversioned libcuda.so is only in
// development packages.
const cudaLibrary = "libcuda.so.1"

// CUresult codes this package acts on (cuda.h).
const (
	cudaSuccess                = 0
	cudaErrorInvalidValue      = 1
	cudaErrorOutOfMemory       = 2
	cudaErrorNotInitialized    = 3
	cudaErrorDeinitialized     = 4
	cudaErrorStubLibrary       = 34
	cudaErrorDeviceUnavailable = 46
	cudaErrorNoDevice          = 100
	cudaErrorInvalidDevice     = 101
	cudaErrorNotReady          = 600
	cudaErrorDriverMismatch    = 803 // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
)

const (
	cuIpcMemLazyEnablePeerAccess = 0x1
	cuStreamNonBlocking          = 0x1
	cuEventBlockingSync          = 0x1
	cuEventDisableTiming         = 0x2
)

// fenceFlags: the driver spins while a slot's fence is waited for (its
// default with one context on a host of many cores). Fences that sleep
// (cuEventBlockingSync) cost less CPU when copies are the bottleneck but
// read no faster end to end (docs/benchmarks.md, "Defaults and why"). A variable so that the benchmark can compare the two.
var fenceFlags uint32 = cuEventDisableTiming

// cuIpcMemHandle is CUipcMemHandle, passed by value.
type cuIpcMemHandle struct{ Reserved [64]byte }

// driver holds the bound driver functions; every one returns a CUresult.
type driver struct {
	cuInit                   func(flags uint32) int32
	cuDeviceGetCount         func(count *int32) int32
	cuDeviceGet              func(dev *int32, ordinal int32) int32
	cuDeviceGetName          func(name *byte, size int32, dev int32) int32
	cuDeviceTotalMem         func(bytes *uint64, dev int32) int32
	cuDeviceGetPCIBusId      func(id *byte, size int32, dev int32) int32
	cuDevicePrimaryCtxRetain func(ctx *uintptr, dev int32) int32
	cuCtxSetCurrent          func(ctx uintptr) int32
	cuIpcOpenMemHandle       func(dptr *uint64, h cuIpcMemHandle, flags uint32) int32
	cuIpcCloseMemHandle      func(dptr uint64) int32
	cuMemGetAddressRange     func(base *uint64, size *uint64, dptr uint64) int32
	cuMemHostAlloc           func(p *unsafe.Pointer, size uint64, flags uint32) int32
	cuMemFreeHost            func(p unsafe.Pointer) int32
	cuMemcpyHtoDAsync        func(dst uint64, src unsafe.Pointer, size uint64, stream uintptr) int32
	cuMemcpyDtoDAsync        func(dst uint64, src uint64, size uint64, stream uintptr) int32
	cuMemcpyDtoHAsync        func(dst unsafe.Pointer, src uint64, size uint64, stream uintptr) int32
	cuStreamCreate           func(stream *uintptr, flags uint32) int32
	cuStreamSynchronize      func(stream uintptr) int32
	cuStreamDestroy          func(stream uintptr) int32
	cuEventCreate            func(event *uintptr, flags uint32) int32
	cuEventRecord            func(event uintptr, stream uintptr) int32
	cuEventQuery             func(event uintptr) int32
	cuEventSynchronize       func(event uintptr) int32
	cuEventDestroy           func(event uintptr) int32
	cuGetErrorName           func(code int32, name **byte) int32

	// Used by the tests to play the exporting process.
	cuMemAlloc        func(dptr *uint64, size uint64) int32
	cuMemFree         func(dptr uint64) int32
	cuIpcGetMemHandle func(h *cufile.Handle, dptr uint64) int32
	cuMemcpyDtoH      func(dst unsafe.Pointer, src uint64, size uint64) int32
	cuMemsetD8        func(dptr uint64, value uint8, count uint64) int32
	cuCtxSynchronize  func() int32
}

// symbols pairs each field with its versioned export name.
func (d *driver) symbols() []struct {
	name string
	fn   any
} {
	return []struct {
		name string
		fn   any
	}{
		{"cuInit", &d.cuInit},
		{"cuDeviceGetCount", &d.cuDeviceGetCount},
		{"cuDeviceGet", &d.cuDeviceGet},
		{"cuDeviceGetName", &d.cuDeviceGetName},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem},
		{"cuDeviceGetPCIBusId", &d.cuDeviceGetPCIBusId},
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent},
		{"cuIpcOpenMemHandle_v2", &d.cuIpcOpenMemHandle},
		{"cuIpcCloseMemHandle", &d.cuIpcCloseMemHandle},
		{"cuMemGetAddressRange_v2", &d.cuMemGetAddressRange},
		{"cuMemHostAlloc", &d.cuMemHostAlloc},
		{"cuMemFreeHost", &d.cuMemFreeHost},
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync},
		{"cuMemcpyDtoDAsync_v2", &d.cuMemcpyDtoDAsync},
		{"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync},
		{"cuStreamCreate", &d.cuStreamCreate},
		{"cuStreamSynchronize", &d.cuStreamSynchronize},
		{"cuStreamDestroy_v2", &d.cuStreamDestroy},
		{"cuEventCreate", &d.cuEventCreate},
		{"cuEventRecord", &d.cuEventRecord},
		{"cuEventQuery", &d.cuEventQuery},
		{"cuEventSynchronize", &d.cuEventSynchronize},
		{"cuEventDestroy_v2", &d.cuEventDestroy},
		{"cuGetErrorName", &d.cuGetErrorName},
		{"cuMemAlloc_v2", &d.cuMemAlloc},
		{"cuMemFree_v2", &d.cuMemFree},
		{"cuIpcGetMemHandle", &d.cuIpcGetMemHandle},
		{"cuMemcpyDtoH_v2", &d.cuMemcpyDtoH},
		{"cuMemsetD8_v2", &d.cuMemsetD8},
		{"cuCtxSynchronize", &d.cuCtxSynchronize},
	}
}

// CUDAError is a failed driver call. It wraps the sentinel the code maps to,
// if any, so errors.Is(err, ErrBadHandle) and the like work.
type CUDAError struct {
	Op   string // the driver function
	Code int    // the CUresult
	Name string // e.g. CUDA_ERROR_INVALID_VALUE
	kind error
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("cufile: %s: %s (%d)", e.Op, e.Name, e.Code)
}

func (e *CUDAError) Unwrap() error { return e.kind }

// fail describes a failed call; kind, when not nil, overrides the usual
// mapping of the code to a sentinel.
func (d *driver) fail(op string, code int32, kind error) error {
	if kind == nil {
		kind = codeKind(code)
	}
	return &CUDAError{Op: op, Code: int(code), Name: d.errorName(code), kind: kind}
}

func codeKind(code int32) error {
	switch code {
	case cudaErrorStubLibrary, cudaErrorDriverMismatch:
		return cufile.ErrNoDriver
	case cudaErrorNoDevice, cudaErrorInvalidDevice, cudaErrorDeviceUnavailable:
		return cufile.ErrNoDevice
	}
	return nil
}

func (d *driver) errorName(code int32) string {
	var p *byte
	if d.cuGetErrorName(code, &p) != cudaSuccess || p == nil {
		return "CUDA error"
	}
	return unix.BytePtrToString(p)
}

// New opens the CUDA driver library; CUDA itself is initialised on first
// use. When the library cannot be loaded the error wraps cufile.ErrNoDriver
// and the Backend, never nil, fails every call with that error, so a daemon
// can log the cause and keep serving ordinary reads.
func New() (cufile.Backend, error) { return newCUDA(cudaLibrary) }

func newCUDA(library string) (*cudaBackend, error) {
	drv, err := openDriver(library)
	return &cudaBackend{drv: drv, loadErr: err}, err
}

type cudaBackend struct {
	drv     *driver
	loadErr error

	mu      sync.Mutex
	inited  bool
	initErr error
	devices []*cudaDevice
}

func (b *cudaBackend) Name() string { return "cuda" }

// init runs cuInit and lists the devices, once; contexts come later, per
// device, since each one costs device memory.
func (b *cudaBackend) init() error {
	if b.loadErr != nil {
		return b.loadErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inited {
		return b.initErr
	}
	b.inited = true
	b.initErr = b.enumerate()
	return b.initErr
}

func (b *cudaBackend) enumerate() error {
	d := b.drv
	if r := d.cuInit(0); r != cudaSuccess {
		kind := codeKind(r)
		if r == cudaErrorNotInitialized || r == cudaErrorDeinitialized {
			kind = cufile.ErrNoDriver
		}
		return d.fail("cuInit", r, kind)
	}
	var count int32
	if r := d.cuDeviceGetCount(&count); r != cudaSuccess {
		return d.fail("cuDeviceGetCount", r, nil)
	}
	if count == 0 {
		return fmt.Errorf("%w: the driver sees no device", cufile.ErrNoDevice)
	}
	for i := range count {
		dev := &cudaDevice{drv: d}
		if r := d.cuDeviceGet(&dev.handle, i); r != cudaSuccess {
			return d.fail("cuDeviceGet", r, nil)
		}
		var name [256]byte
		if r := d.cuDeviceGetName(&name[0], int32(len(name)), dev.handle); r != cudaSuccess {
			return d.fail("cuDeviceGetName", r, nil)
		}
		var total uint64
		if r := d.cuDeviceTotalMem(&total, dev.handle); r != cudaSuccess {
			return d.fail("cuDeviceTotalMem_v2", r, nil)
		}
		// The PCI address names the device whatever a process's
		// CUDA_VISIBLE_DEVICES makes of the ordinals (cufile.DeviceInfo).
		var bus [32]byte
		if r := d.cuDeviceGetPCIBusId(&bus[0], int32(len(bus)), dev.handle); r != cudaSuccess {
			return d.fail("cuDeviceGetPCIBusId", r, nil)
		}
		dev.info = cufile.DeviceInfo{Ordinal: int(i), Name: unix.ByteSliceToString(name[:]), TotalMem: total,
			PCIBusID: unix.ByteSliceToString(bus[:])}
		b.devices = append(b.devices, dev)
	}
	return nil
}

func (b *cudaBackend) Devices() ([]cufile.DeviceInfo, error) {
	if err := b.init(); err != nil {
		return nil, err
	}
	infos := make([]cufile.DeviceInfo, len(b.devices))
	for i, d := range b.devices {
		infos[i] = d.info
	}
	return infos, nil
}

// device returns a device with its primary context retained.
func (b *cudaBackend) device(ordinal int) (*cudaDevice, error) {
	if err := b.init(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(b.devices) {
		return nil, fmt.Errorf("%w: %d (%d devices)", cufile.ErrNoDevice, ordinal, len(b.devices))
	}
	d := b.devices[ordinal]
	return d, d.retain()
}

func (b *cudaBackend) Import(device int, h cufile.Handle) (cufile.Allocation, error) {
	dev, err := b.device(device)
	if err != nil {
		return nil, err
	}
	a := &cudaAllocation{dev: dev}
	err = dev.Run(func() error {
		d := dev.drv
		if r := d.cuIpcOpenMemHandle(&a.ptr, cuIpcMemHandle{h}, cuIpcMemLazyEnablePeerAccess); r != cudaSuccess {
			return d.fail("cuIpcOpenMemHandle_v2", r, ipcOpenKind(r))
		}
		var base, size uint64
		if r := d.cuMemGetAddressRange(&base, &size, a.ptr); r != cudaSuccess {
			d.cuIpcCloseMemHandle(a.ptr)
			return d.fail("cuMemGetAddressRange_v2", r, nil)
		}
		// The handle names the allocation's base; measure from the
		// pointer all the same.
		a.size = base + size - a.ptr
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// ipcOpenKind: a handle the driver will not open is the caller's bad
// handle, whatever the code says, except for the driver's own troubles.
func ipcOpenKind(code int32) error {
	if kind := codeKind(code); kind != nil {
		return kind
	}
	if code == cudaErrorOutOfMemory {
		return nil
	}
	return cufile.ErrBadHandle
}

func (b *cudaBackend) NewStager(device int, cfg cufile.StagerConfig) (cufile.Stager, error) {
	dev, err := b.device(device)
	if err != nil {
		return nil, err
	}
	return staging.New(dev, cfg)
}

type cudaDevice struct {
	drv    *driver
	info   cufile.DeviceInfo
	handle int32 // CUdevice

	mu  sync.Mutex
	ctx uintptr // primary context, once retained
}

func (d *cudaDevice) retain() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx != 0 {
		return nil
	}
	var ctx uintptr
	if r := d.drv.cuDevicePrimaryCtxRetain(&ctx, d.handle); r != cudaSuccess {
		return d.drv.fail("cuDevicePrimaryCtxRetain", r, nil)
	}
	d.ctx = ctx
	return nil
}

func (d *cudaDevice) Ordinal() int { return d.info.Ordinal }

// Run keeps the goroutine on one OS thread, where the device's primary
// context is made current, for the whole batch of driver calls in fn.
func (d *cudaDevice) Run(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := d.drv.cuCtxSetCurrent(d.ctx); r != cudaSuccess {
		return d.drv.fail("cuCtxSetCurrent", r, nil)
	}
	return fn()
}

func (d *cudaDevice) AllocHost(size int) ([]byte, error) {
	var p unsafe.Pointer
	if r := d.drv.cuMemHostAlloc(&p, uint64(size), 0); r != cudaSuccess {
		return nil, d.drv.fail("cuMemHostAlloc", r, nil)
	}
	return unsafe.Slice((*byte)(p), size), nil
}

func (d *cudaDevice) FreeHost(buf []byte) error {
	if r := d.drv.cuMemFreeHost(unsafe.Pointer(unsafe.SliceData(buf))); r != cudaSuccess {
		return d.drv.fail("cuMemFreeHost", r, nil)
	}
	return nil
}

func (d *cudaDevice) NewStream() (uintptr, error) {
	var s uintptr
	if r := d.drv.cuStreamCreate(&s, cuStreamNonBlocking); r != cudaSuccess {
		return 0, d.drv.fail("cuStreamCreate", r, nil)
	}
	return s, nil
}

func (d *cudaDevice) DestroyStream(s uintptr) error {
	if r := d.drv.cuStreamDestroy(s); r != cudaSuccess {
		return d.drv.fail("cuStreamDestroy_v2", r, nil)
	}
	return nil
}

func (d *cudaDevice) NewFence() (uintptr, error) {
	var e uintptr
	if r := d.drv.cuEventCreate(&e, fenceFlags); r != cudaSuccess {
		return 0, d.drv.fail("cuEventCreate", r, nil)
	}
	return e, nil
}

func (d *cudaDevice) DestroyFence(e uintptr) error {
	if r := d.drv.cuEventDestroy(e); r != cudaSuccess {
		return d.drv.fail("cuEventDestroy_v2", r, nil)
	}
	return nil
}

// CopyAsync: an asynchronous CUDA fault is not told apart per copy (it
// poisons the context, and every later wait reports it), so fault is unused.
func (d *cudaDevice) CopyAsync(stream, fence uintptr, src []byte, dst cufile.Allocation, dstOff uint64, _ func(error)) error {
	a, ok := dst.(*cudaAllocation)
	switch {
	case !ok:
		return fmt.Errorf("%w: not a CUDA allocation", cufile.ErrBadHandle)
	case a.dev != d:
		return fmt.Errorf("%w: allocation on device %d", cufile.ErrNoDevice, a.dev.Ordinal())
	case a.closed.Load():
		return fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
	}
	if r := d.drv.cuMemcpyHtoDAsync(a.ptr+dstOff, unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)), stream); r != cudaSuccess {
		return d.drv.fail("cuMemcpyHtoDAsync_v2", r, nil)
	}
	if r := d.drv.cuEventRecord(fence, stream); r != cudaSuccess {
		return d.drv.fail("cuEventRecord", r, nil)
	}
	return nil
}

func (d *cudaDevice) CopyDtoDAsync(stream uintptr, src cufile.Allocation, srcOff uint64, dst cufile.Allocation, dstOff uint64, n uint64, _ func(error)) error {
	from, ok1 := src.(*cudaAllocation)
	to, ok2 := dst.(*cudaAllocation)
	switch {
	case !ok1 || !ok2:
		return fmt.Errorf("%w: not a CUDA allocation", cufile.ErrBadHandle)
	case from.dev != d || to.dev != d:
		return fmt.Errorf("%w: allocation on another device", cufile.ErrNoDevice)
	case from.closed.Load() || to.closed.Load():
		return fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
	}
	if r := d.drv.cuMemcpyDtoDAsync(to.ptr+dstOff, from.ptr+srcOff, n, stream); r != cudaSuccess {
		return d.drv.fail("cuMemcpyDtoDAsync_v2", r, nil)
	}
	return nil
}

// CopyDtoHAsync copies into dst, which must be pinned (a stager's slot) for
// the copy to be asynchronous; fault is unused, as for CopyAsync.
func (d *cudaDevice) CopyDtoHAsync(stream uintptr, src cufile.Allocation, srcOff uint64, dst []byte, _ func(error)) error {
	a, ok := src.(*cudaAllocation)
	switch {
	case !ok:
		return fmt.Errorf("%w: not a CUDA allocation", cufile.ErrBadHandle)
	case a.dev != d:
		return fmt.Errorf("%w: allocation on device %d", cufile.ErrNoDevice, a.dev.Ordinal())
	case a.closed.Load():
		return fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
	}
	if r := d.drv.cuMemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), a.ptr+srcOff, uint64(len(dst)), stream); r != cudaSuccess {
		return d.drv.fail("cuMemcpyDtoHAsync_v2", r, nil)
	}
	return nil
}

func (d *cudaDevice) RecordFence(stream, fence uintptr) error {
	if r := d.drv.cuEventRecord(fence, stream); r != cudaSuccess {
		return d.drv.fail("cuEventRecord", r, nil)
	}
	return nil
}

// AllocDevice allocates device memory of the daemon's own; called inside
// Run, and its Close frees it.
func (d *cudaDevice) AllocDevice(size int) (cufile.Allocation, error) {
	a := &cudaAllocation{dev: d, size: uint64(size), local: true}
	if r := d.drv.cuMemAlloc(&a.ptr, uint64(size)); r != cudaSuccess {
		return nil, d.drv.fail("cuMemAlloc_v2", r, nil)
	}
	return a, nil
}

func (d *cudaDevice) FenceDone(e uintptr) (bool, error) {
	switch r := d.drv.cuEventQuery(e); r {
	case cudaSuccess:
		return true, nil
	case cudaErrorNotReady:
		return false, nil
	default:
		return false, d.drv.fail("cuEventQuery", r, nil)
	}
}

func (d *cudaDevice) WaitFence(e uintptr) error {
	if r := d.drv.cuEventSynchronize(e); r != cudaSuccess {
		return d.drv.fail("cuEventSynchronize", r, nil)
	}
	return nil
}

func (d *cudaDevice) SyncStream(s uintptr) error {
	if r := d.drv.cuStreamSynchronize(s); r != cudaSuccess {
		return d.drv.fail("cuStreamSynchronize", r, nil)
	}
	return nil
}

// cudaAllocation is an allocation opened from an IPC handle.
type cudaAllocation struct {
	dev    *cudaDevice
	ptr    uint64 // CUdeviceptr
	size   uint64
	closed atomic.Bool
	local  bool // allocated in this process with cuMemAlloc (a twin, tools): Close frees it
}

func (a *cudaAllocation) Device() int { return a.dev.Ordinal() }

// DevicePtr is the CUdeviceptr the import returned (cufile.DevicePointer).
func (a *cudaAllocation) DevicePtr() uint64 {
	if a.closed.Load() {
		return 0
	}
	return a.ptr
}
func (a *cudaAllocation) Size() uint64 { return a.size }

func (a *cudaAllocation) Close() error {
	if !a.closed.CompareAndSwap(false, true) {
		return nil
	}
	return a.dev.Run(func() error {
		if a.local {
			if r := a.dev.drv.cuMemFree(a.ptr); r != cudaSuccess {
				return a.dev.drv.fail("cuMemFree_v2", r, nil)
			}
			return nil
		}
		if r := a.dev.drv.cuIpcCloseMemHandle(a.ptr); r != cudaSuccess {
			return a.dev.drv.fail("cuIpcCloseMemHandle", r, nil)
		}
		return nil
	})
}

// AllocDevice allocates size bytes of device memory in this process, for
// tools that play a GPU program themselves (bench/s3load); Close frees it.
// Only the CUDA backend has device memory of its own.
func AllocDevice(b cufile.Backend, device int, size uint64) (cufile.Allocation, error) {
	cb, ok := b.(*cudaBackend)
	if !ok {
		return nil, fmt.Errorf("%w: device memory needs the CUDA backend, not %s", cufile.ErrNoDriver, b.Name())
	}
	dev, err := cb.device(device)
	if err != nil {
		return nil, err
	}
	a := &cudaAllocation{dev: dev, size: size, local: true}
	err = dev.Run(func() error {
		if r := dev.drv.cuMemAlloc(&a.ptr, size); r != cudaSuccess {
			return dev.drv.fail("cuMemAlloc_v2", r, nil)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}
