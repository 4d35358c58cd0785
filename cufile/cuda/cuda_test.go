package cuda

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

// The tests below that need a GPU skip when libcuda.so.1 cannot be loaded
// or sees no device. Built with CGO_ENABLED=0, the test binary runs on the
// GPU machine without Go:
//
//	./cufile.test -test.run 'CUDA' -test.bench 'CUDA' -test.v

func TestCUDAMissingLibraryIsErrNoDriver(t *testing.T) {
	b, err := newCUDA("libcuda-not-here.so.1")
	if !errors.Is(err, cufile.ErrNoDriver) || !strings.Contains(err.Error(), "libcuda-not-here.so.1") {
		t.Fatalf("newCUDA = %v; want ErrNoDriver naming the library", err)
	}
	checkNoDriver(t, b)
}

// Runs only where libcuda.so.1 really is absent (CI).
func TestCUDAWithoutDriver(t *testing.T) {
	b, err := New()
	if err == nil {
		t.Skip("libcuda.so.1 is present")
	}
	if !errors.Is(err, cufile.ErrNoDriver) {
		t.Fatalf("New = %v; want ErrNoDriver", err)
	}
	checkNoDriver(t, b)
}

func checkNoDriver(t *testing.T, b cufile.Backend) {
	t.Helper()
	if b == nil || b.Name() != "cuda" {
		t.Fatalf("backend %v", b)
	}
	if _, err := b.Devices(); !errors.Is(err, cufile.ErrNoDriver) {
		t.Errorf("Devices = %v", err)
	}
	if _, err := b.Import(0, cufile.Handle{}); !errors.Is(err, cufile.ErrNoDriver) {
		t.Errorf("Import = %v", err)
	}
	if _, err := b.NewStager(0, cufile.StagerConfig{}); !errors.Is(err, cufile.ErrNoDriver) {
		t.Errorf("NewStager = %v", err)
	}
}

func TestCUDAErrorMapping(t *testing.T) {
	for code, want := range map[int32]error{
		cudaErrorNoDevice:      cufile.ErrNoDevice,
		cudaErrorInvalidDevice: cufile.ErrNoDevice,
		cudaErrorStubLibrary:   cufile.ErrNoDriver,
	} {
		if got := ipcOpenKind(code); got != want {
			t.Errorf("ipcOpenKind(%d) = %v; want %v", code, got, want)
		}
	}
	for _, code := range []int32{cudaErrorInvalidValue, 400, 201, 205, 999} {
		if ipcOpenKind(code) != cufile.ErrBadHandle {
			t.Errorf("ipcOpenKind(%d) is not ErrBadHandle", code)
		}
	}
	if ipcOpenKind(cudaErrorOutOfMemory) != nil {
		t.Error("out of memory on IPC open is not the caller's bad handle")
	}
}

var (
	gpuOnce    sync.Once
	gpuBackend *cudaBackend
	gpuSkip    string
)

// gpu returns the process's CUDA backend, or skips.
func gpu(t testing.TB) *cudaBackend {
	t.Helper()
	gpuOnce.Do(func() {
		b, err := newCUDA(cudaLibrary)
		if err != nil {
			gpuSkip = err.Error()
			return
		}
		if _, err := b.Devices(); err != nil {
			gpuSkip = err.Error()
			return
		}
		gpuBackend = b
	})
	if gpuBackend == nil {
		t.Skip("no CUDA: " + gpuSkip)
	}
	return gpuBackend
}

func TestCUDADevices(t *testing.T) {
	b := gpu(t)
	devs, err := b.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range devs {
		t.Logf("device %d: %s, %d GiB", d.Ordinal, d.Name, d.TotalMem>>30)
		if d.Ordinal != i || d.Name == "" || d.TotalMem == 0 {
			t.Errorf("device %d: %+v", i, d)
		}
	}
	if _, err := b.Import(len(devs), cufile.Handle{}); !errors.Is(err, cufile.ErrNoDevice) {
		t.Errorf("Import on device %d = %v; want ErrNoDevice", len(devs), err)
	}
	if _, err := b.NewStager(-1, cufile.StagerConfig{}); !errors.Is(err, cufile.ErrNoDevice) {
		t.Errorf("NewStager(-1) = %v; want ErrNoDevice", err)
	}
	if err := b.drv.fail("cuTest", cudaErrorInvalidValue, nil); !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_VALUE") {
		t.Errorf("error text %q lacks the CUDA error name", err)
	}
}

// deviceAlloc allocates size bytes on device 0 of this process, set to fill.
func deviceAlloc(t testing.TB, b *cudaBackend, size uint64, fill byte) *cudaAllocation {
	t.Helper()
	alloc, err := AllocDevice(b, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	a := alloc.(*cudaAllocation)
	t.Cleanup(func() { a.Close() })
	dev := a.dev
	err = dev.Run(func() error {
		d := dev.drv
		if r := d.cuMemsetD8(a.ptr, fill, size); r != cudaSuccess {
			return d.fail("cuMemsetD8_v2", r, nil)
		}
		if r := d.cuCtxSynchronize(); r != cudaSuccess {
			return d.fail("cuCtxSynchronize", r, nil)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// deviceSum hashes the first n bytes at ptr, read back with cuMemcpyDtoH.
func deviceSum(dev *cudaDevice, ptr, n uint64) ([32]byte, error) {
	buf := make([]byte, n)
	err := dev.Run(func() error {
		if r := dev.drv.cuMemcpyDtoH(unsafe.Pointer(&buf[0]), ptr, n); r != cudaSuccess {
			return dev.drv.fail("cuMemcpyDtoH_v2", r, nil)
		}
		return nil
	})
	return sha256.Sum256(buf), err
}

func expectedSum(size int, fill byte, off int, data []byte) [32]byte {
	want := bytes.Repeat([]byte{fill}, size)
	copy(want[off:], data)
	return sha256.Sum256(want)
}

func TestCUDAStagerCopyIsByteExact(t *testing.T) {
	b := gpu(t)
	const size, off = 8<<20 + 5, 4097
	a := deviceAlloc(t, b, size, 0xa5)
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 1 << 20, Slots: 3, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	data := cufiletest.Pattern(5<<20+3, 7)
	c := cufiletest.CopyThrough(t, st, a, off, data)
	refuseOutOfRange(t, c, a)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := deviceSum(a.dev, a.ptr, size)
	if err != nil {
		t.Fatal(err)
	}
	if got != expectedSum(size, 0xa5, off, data) {
		t.Fatal("device bytes differ from what was copied")
	}
}

// refuseOutOfRange tries copies that end past a, and one into an allocation
// of another kind; all must be refused before anything is enqueued.
func refuseOutOfRange(t *testing.T, c cufile.Copier, a cufile.Allocation) {
	t.Helper()
	for _, tc := range []struct {
		n    int
		off  uint64
		dst  cufile.Allocation
		want error
	}{
		{11, a.Size() - 10, a, cufile.ErrOutOfRange},
		{1, a.Size(), a, cufile.ErrOutOfRange},
		{1, 0, cufiletest.FakeAllocation{Dev: 0, Len: 100}, cufile.ErrBadHandle},
		{1, 0, cufiletest.FakeAllocation{Dev: 7, Len: 100}, cufile.ErrNoDevice},
	} {
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for i := range slot.Buf {
			slot.Buf[i] = 0xee
		}
		if err := c.CopyAsync(slot, tc.n, tc.dst, tc.off); !errors.Is(err, tc.want) {
			t.Errorf("CopyAsync(n=%d, off=%d) = %v; want %v", tc.n, tc.off, err, tc.want)
		}
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
}

// IPC handles cannot be opened by the process that exported them.
func TestCUDAImportRefusesBadHandles(t *testing.T) {
	b := gpu(t)
	a := deviceAlloc(t, b, 1<<20, 0)
	var own cufile.Handle
	err := a.dev.Run(func() error {
		if r := a.dev.drv.cuIpcGetMemHandle(&own, a.ptr); r != cudaSuccess {
			return a.dev.drv.fail("cuIpcGetMemHandle", r, nil)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var junk cufile.Handle
	rand.Read(junk[:])
	for what, h := range map[string]cufile.Handle{"own": own, "junk": junk, "zero": {}} {
		imp, err := b.Import(0, h)
		if err == nil {
			imp.Close()
		}
		if !errors.Is(err, cufile.ErrBadHandle) {
			t.Errorf("Import(%s handle) = %v; want ErrBadHandle", what, err)
		} else {
			t.Logf("Import(%s handle): %v", what, err)
		}
	}
}

// The exporter runs in a child process (a re-run of this test binary), as
// the caller's PyTorch process would: it allocates, prints the handle, and
// hashes its memory on request.
const exporterEnv = "CUFILE_TEST_EXPORT_SIZE"

func TestCUDAImportFromAnotherProcess(t *testing.T) {
	b := gpu(t)
	const size, off = 64<<20 + 3, 1<<20 + 11
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCUDAExporterProcess$")
	cmd.Env = append(os.Environ(), exporterEnv+"="+strconv.Itoa(size))
	cmd.Stderr = os.Stderr
	toChild, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer toChild.Close()
	fromChild := bufio.NewScanner(stdout)
	expect := func(key string) []byte {
		t.Helper()
		for fromChild.Scan() {
			if v, ok := strings.CutPrefix(fromChild.Text(), key+" "); ok {
				b, err := hex.DecodeString(v)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
		t.Fatalf("exporter ended before sending %q: %v", key, fromChild.Err())
		return nil
	}

	var h cufile.Handle
	copy(h[:], expect("handle"))
	cache := cufile.NewImportCache(b)
	owner := cmd.Process.Pid
	a, err := cache.Acquire(owner, 0, h)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := cache.Acquire(owner, 0, h); err != nil || again != a || cache.OpenImports() != 1 {
		t.Fatalf("second Acquire: %v, %v, %d open", again, err, cache.OpenImports())
	}
	cache.Put(a)
	if a.Size() < size {
		t.Fatalf("imported Size %d < %d allocated", a.Size(), size)
	}
	t.Logf("imported %d bytes (allocated %d)", a.Size(), size)

	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 4 << 20, Slots: 4, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	data := cufiletest.Pattern(40<<20+17, 3)
	c := cufiletest.CopyThrough(t, st, a, off, data)
	refuseOutOfRange(t, c, a)
	t.Logf("copy waits: %v", time.Duration(c.WaitNanos()))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	fmt.Fprintln(toChild, "sum")
	if got := expect("sum"); !bytes.Equal(got, sumSlice(expectedSum(size, 0xa5, off, data))) {
		t.Fatal("the exporter sees other bytes than were copied")
	}

	// Close before the exporter frees its memory.
	cache.Put(a)
	if err := cache.ReleaseOwner(owner); err != nil {
		t.Fatal(err)
	}
	if cache.OpenImports() != 0 {
		t.Fatal("import still open after its owner left")
	}
	toChild.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exporter: %v", err)
	}
}

func sumSlice(s [32]byte) []byte { return s[:] }

// TestCUDAExporterProcess is the child of TestCUDAImportFromAnotherProcess.
func TestCUDAExporterProcess(t *testing.T) {
	sizeText := os.Getenv(exporterEnv)
	if sizeText == "" {
		t.Skip("runs only as the child of TestCUDAImportFromAnotherProcess")
	}
	size, err := strconv.ParseUint(sizeText, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	b := gpu(t)
	a := deviceAlloc(t, b, size, 0xa5)
	var h cufile.Handle
	err = a.dev.Run(func() error {
		if r := a.dev.drv.cuIpcGetMemHandle(&h, a.ptr); r != cudaSuccess {
			return a.dev.drv.fail("cuIpcGetMemHandle", r, nil)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("handle %x\n", h[:])
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "sum" {
			sum, err := deviceSum(a.dev, a.ptr, size)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("sum %x\n", sum[:])
		}
	}
}

// BenchmarkCUDAStagerCopy measures host-to-device throughput through the
// stager: slots are not filled, so this is the copy path alone.
func BenchmarkCUDAStagerCopy(bm *testing.B) {
	b := gpu(bm)
	const total = 1 << 30
	a := deviceAlloc(bm, b, total, 0)
	for _, cfg := range []cufile.StagerConfig{
		{SlotSize: 4 << 20, Slots: 8, Streams: 1},
		{SlotSize: 16 << 20, Slots: 8, Streams: 1},
		{SlotSize: 16 << 20, Slots: 8, Streams: 4},
	} {
		bm.Run(fmt.Sprintf("slot=%dMiB/streams=%d", cfg.SlotSize>>20, cfg.Streams), func(bm *testing.B) {
			st, err := b.NewStager(0, cfg)
			if err != nil {
				bm.Fatal(err)
			}
			defer st.Close()
			bm.SetBytes(total)
			var waited int64
			for bm.Loop() {
				c, _ := st.NewCopier()
				for off := uint64(0); off < total; off += uint64(cfg.SlotSize) {
					slot, err := c.AcquireSlot(context.Background())
					if err != nil {
						bm.Fatal(err)
					}
					if err := c.CopyAsync(slot, cfg.SlotSize, a, off); err != nil {
						bm.Fatal(err)
					}
				}
				if err := c.Close(); err != nil {
					bm.Fatal(err)
				}
				waited += c.WaitNanos()
			}
			bm.ReportMetric(float64(waited)/float64(bm.Elapsed().Nanoseconds()), "wait-share")
		})
	}
}

// BenchmarkCUDACopyCost measures the daemon's side of the copy path: one
// copier per goroutine, 8 streams, 1 GiB of pinned slots in one pool, with
// slots of 1 and 4 MiB and fences that spin or sleep
// while waited for. Slots are not filled, so the copies are the bottleneck
// and acquires wait: cpu-ns/slot is the process's CPU per slot (driver
// calls, stager and waiting), call-ns/slot the time inside CopyAsync,
// acquire-ns/slot the time inside AcquireSlot.
func BenchmarkCUDACopyCost(bm *testing.B) {
	b := gpu(bm)
	const perWorker = 256 << 20
	for _, wait := range []struct {
		name  string
		flags uint32
	}{{"spin", cuEventDisableTiming}, {"block", cuEventDisableTiming | cuEventBlockingSync}} {
		for _, slotSize := range []int{1 << 20, 4 << 20} {
			for _, workers := range []int{1, 8, 64} {
				name := fmt.Sprintf("wait=%s/slot=%dMiB/workers=%d", wait.name, slotSize>>20, workers)
				bm.Run(name, func(bm *testing.B) {
					saved := fenceFlags
					fenceFlags = wait.flags // read when the stager makes its fences
					defer func() { fenceFlags = saved }()
					cfg := cufile.StagerConfig{SlotSize: slotSize, Slots: (1 << 30) / slotSize, Streams: 8}
					copyCost(bm, b, cfg, workers, perWorker)
				})
			}
		}
	}
}

func copyCost(bm *testing.B, b *cudaBackend, cfg cufile.StagerConfig, workers int, perWorker uint64) {
	st, err := b.NewStager(0, cfg)
	if err != nil {
		bm.Fatal(err)
	}
	defer st.Close()
	allocs := make([]*cudaAllocation, workers)
	for i := range allocs {
		allocs[i] = deviceAlloc(bm, b, perWorker, 0)
	}
	bm.SetBytes(int64(workers) * int64(perWorker))
	var t copyCostTimes
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	for bm.Loop() {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				copyCostWorker(bm, st, cfg.SlotSize, allocs[w], perWorker, &t)
			}()
		}
		wg.Wait()
	}
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	slots := float64(t.slots.Load())
	bm.ReportMetric(float64(cpu)/slots, "cpu-ns/slot")
	bm.ReportMetric(float64(t.callNs.Load())/slots, "call-ns/slot")
	bm.ReportMetric(float64(t.acquireNs.Load())/slots, "acquire-ns/slot")
}

type copyCostTimes struct{ callNs, acquireNs, slots atomic.Int64 }

func copyCostWorker(bm *testing.B, st cufile.Stager, slotSize int, dst cufile.Allocation, n uint64, t *copyCostTimes) {
	c, err := st.NewCopier()
	if err != nil {
		bm.Error(err)
		return
	}
	defer func() {
		if err := c.Close(); err != nil {
			bm.Error(err)
		}
	}()
	for off := uint64(0); off < n; off += uint64(slotSize) {
		t0 := time.Now()
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			bm.Error(err)
			return
		}
		t1 := time.Now()
		if err := c.CopyAsync(slot, slotSize, dst, off); err != nil {
			bm.Error(err)
			return
		}
		t.acquireNs.Add(int64(t1.Sub(t0)))
		t.callNs.Add(int64(time.Since(t1)))
		t.slots.Add(1)
	}
}
