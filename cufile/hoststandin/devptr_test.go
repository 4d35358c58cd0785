package hoststandin

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

func TestHostStandinDevicePointerIsTheMapping(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "buf"), make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var h cufile.Handle
	copy(h[:], "buf")
	a, err := b.Import(0, h)
	if err != nil {
		t.Fatal(err)
	}
	dp, ok := a.(cufile.DevicePointer)
	if !ok {
		t.Fatal("the host stand-in's allocation has no DevicePtr")
	}
	mem := a.(*hostAllocation).mem
	if got, want := dp.DevicePtr(), uint64(uintptr(unsafe.Pointer(&mem[0]))); got == 0 || got != want {
		t.Fatalf("DevicePtr() = %#x, want the mapping at %#x", got, want)
	}
	a.Close()
	if p := dp.DevicePtr(); p != 0 {
		t.Fatalf("DevicePtr() after Close = %#x, want 0", p)
	}
}
