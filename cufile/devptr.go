package cufile

import "unsafe"

// DevicePointer is implemented by allocations that can name their base
// address, which RDMA registration needs (the NIC maps the memory itself).
// For a CUDA allocation it is the CUdeviceptr the import returned; for the
// host stand-in, the address of the shared mapping. Zero once closed.
type DevicePointer interface {
	DevicePtr() uint64
}

func (a *cudaAllocation) DevicePtr() uint64 {
	if a.closed.Load() {
		return 0
	}
	return a.ptr
}

func (a *hostAllocation) DevicePtr() uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed || len(a.mem) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(a.mem))))
}
