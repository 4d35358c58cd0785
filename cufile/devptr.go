package cufile

// DevicePointer is implemented by allocations that can name their base
// address, which RDMA registration needs (the NIC maps the memory itself).
// For a CUDA allocation it is the CUdeviceptr the import returned; for the
// host stand-in, the address of the shared mapping. Zero once closed.
type DevicePointer interface {
	DevicePtr() uint64
}
