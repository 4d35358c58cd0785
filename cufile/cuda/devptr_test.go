package cuda

import (
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

func TestCUDAAllocationHasDevicePointer(t *testing.T) {
	var a cufile.Allocation = &cudaAllocation{ptr: 0x7f0000200000}
	dp, ok := a.(cufile.DevicePointer)
	if !ok || dp.DevicePtr() != 0x7f0000200000 {
		t.Fatalf("cudaAllocation DevicePtr: %v %v", ok, dp)
	}
	a.(*cudaAllocation).closed.Store(true)
	if dp.DevicePtr() != 0 {
		t.Fatal("a closed CUDA allocation still names its pointer")
	}
}
