package cufilepreload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// The flags of make preload.
var libFlags = []string{"-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"}

const (
	objSize = 5<<20 + 4321 // not a multiple of the daemon's slot
	objSeed = 7
	bigSize = 33<<20 + 1234 // nine of kvikio's 4 MiB tasks, the last short
	bigSeed = 11
)

// rig is what the tests run: the library, the fakes, the program and a mount.
type rig struct {
	lib       string // libs3gdsfs_cufile.so
	fakes     string // libcufile.so.0 and libcuda.so.1, both fakes
	nocufile  string // libcuda.so.1 (the fake) and libcufile.so.0 linked to lib: no NVIDIA libcufile
	prog      string // cuprog, linked against libcufile.so.0 and libcuda.so.1
	bufDir    string // the fake's device memory and the daemon's host stand-in directory
	mp        string
	obj       string // the object's file on the mount
	big       string // a larger object's file on the mount
	local     string // a file of the local disk
	localData []byte
	work      string
	runs      int
	srv       *testenv.Server
}

func gcc(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("gcc", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func setup(t *testing.T) *rig {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the cuFile preload library and its fakes are C (Debian package gcc)")
	}
	testenv.RequireFUSE(t)
	work := t.TempDir()
	r := &rig{work: work, fakes: filepath.Join(work, "fakes"), nocufile: filepath.Join(work, "nocufile"),
		lib: filepath.Join(work, "libs3gdsfs_cufile.so"), prog: filepath.Join(work, "cuprog")}
	for _, d := range []string{r.fakes, r.nocufile} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gcc(t, append(libFlags, "-I../client/c", "-o", r.lib, "src/s3gdsfs_cufile.c", "-ldl", "-lpthread")...)
	warn := []string{"-O2", "-Wall", "-Wextra", "-Werror"}
	gcc(t, append(warn, "-fPIC", "-shared", "-Wl,-soname,libcufile.so.0", "-o", filepath.Join(r.fakes, "libcufile.so.0"),
		"testdata/fake_cufile.c", "-lpthread")...)
	gcc(t, append(warn, "-fPIC", "-shared", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(r.fakes, "libcuda.so.1"),
		"testdata/fake_cuda.c", "-lpthread")...)
	gcc(t, append(warn, "-o", r.prog, "testdata/cuprog.c", "-L"+r.fakes, "-l:libcufile.so.0", "-l:libcuda.so.1", "-lpthread")...)
	// A machine without NVIDIA's libcufile where the library is installed
	// as libcufile.so.0, so the program's libcufile.so.0 is the library.
	for name, target := range map[string]string{"libcufile.so.0": r.lib, "libcuda.so.1": filepath.Join(r.fakes, "libcuda.so.1")} {
		if err := os.Symlink(target, filepath.Join(r.nocufile, name)); err != nil {
			t.Fatal(err)
		}
	}

	r.local = filepath.Join(work, "local.bin")
	r.localData = testenv.RandomBytes(99, 0, 300001)
	if err := os.WriteFile(r.local, r.localData, 0o644); err != nil {
		t.Fatal(err)
	}

	srv := testenv.Start(t)
	r.srv = srv
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", objSize, objSeed)
	srv.PutRandomObject(t, "data", "big", bigSize, bigSeed)
	r.bufDir = t.TempDir()
	r.mp = t.TempDir()
	mounttest.Standin(t, srv, "data", r.mp, r.bufDir)
	r.obj = filepath.Join(r.mp, "obj")
	r.big = filepath.Join(r.mp, "big")
	return r
}

// result is one run of cuprog.
type result struct {
	kv     map[string]string
	stderr string
	log    string // the fake libcufile's calls
	out    []byte // the bytes read
}

func (res result) int(t *testing.T, key string) int64 {
	t.Helper()
	v, ok := res.kv[key]
	if !ok {
		t.Fatalf("cuprog printed no %s=\nstdout: %v\nstderr:\n%s", key, res.kv, res.stderr)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return n
}

// run runs cuprog with the library preloaded; libDir is the
// LD_LIBRARY_PATH (r.fakes or r.nocufile); env adds variables.
func (r *rig) run(t *testing.T, libDir string, env []string, args ...string) result {
	t.Helper()
	r.runs++
	logPath := filepath.Join(r.work, fmt.Sprintf("cufile-%d.log", r.runs))
	outPath := filepath.Join(r.work, fmt.Sprintf("out-%d", r.runs))
	if len(args) > 0 && args[0] == "read" {
		args = append(append(append([]string{}, args[:5]...), outPath), args[5:]...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.prog, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_") && !strings.HasPrefix(kv, "S3GDSFS_CUFILE_") && !strings.HasPrefix(kv, "FAKE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LD_PRELOAD="+r.lib, "LD_LIBRARY_PATH="+libDir, "FAKE_CUFILE_LOG="+logPath,
		"FAKE_CUDA_DIR="+r.bufDir, "S3GDSFS_CUFILE_DEBUG=1")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cuprog %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	res := result{kv: map[string]string{}, stderr: stderr.String()}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			res.kv[k] = v
		}
	}
	if b, err := os.ReadFile(logPath); err == nil {
		res.log = string(b)
	}
	if b, err := os.ReadFile(outPath); err == nil {
		res.out = b
	}
	t.Logf("cuprog %s: %v\n%s", strings.Join(args, " "), res.kv, res.stderr)
	return res
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// checkRead checks a read of [off, off+want) of the object or local file:
// the count, the bytes by sha256, the bytes around them untouched.
func checkRead(t *testing.T, res result, want int64, content func(off int64, n int) []byte, off int64) {
	t.Helper()
	if got := res.int(t, "ret"); got != want {
		t.Fatalf("ret = %d, want %d\nstderr:\n%s", got, want, res.stderr)
	}
	if res.kv["guard"] != "ok" {
		t.Errorf("bytes outside the destination range were written")
	}
	if int64(len(res.out)) != want {
		t.Fatalf("%d bytes came back, want %d", len(res.out), want)
	}
	if got, w := sum(res.out), sum(content(off, int(want))); got != w {
		t.Errorf("sha256 of the bytes read = %s, want %s", got, w)
	}
}

func objBytes(off int64, n int) []byte { return testenv.RandomBytes(objSeed, off, n) }
func bigBytes(off int64, n int) []byte { return testenv.RandomBytes(bigSeed, off, n) }

// cudaCalls are the fake libcuda's counts of the driver calls a cuFile
// library makes to name a destination, as it prints them at exit.
type cudaCalls struct{ addressRange, ipcHandle, attribute, attributes int64 }

var cudaCallsRE = regexp.MustCompile(`fake_cuda calls: cuMemGetAddressRange_v2=(\d+) cuIpcGetMemHandle=(\d+) cuPointerGetAttribute=(\d+) cuPointerGetAttributes=(\d+)`)

func (res result) cudaCalls(t *testing.T) cudaCalls {
	t.Helper()
	m := cudaCallsRE.FindStringSubmatch(res.stderr)
	if m == nil {
		t.Fatalf("the fake libcuda printed no call counts:\n%s", res.stderr)
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	return cudaCalls{n(m[1]), n(m[2]), n(m[3]), n(m[4])}
}

// served checks that the read went through the ioctl: the fake libcufile
// saw no handle and no read.
func served(t *testing.T, res result) {
	t.Helper()
	if strings.Contains(res.log, "cuFileHandleRegister") || strings.Contains(res.log, "cuFileRead") {
		t.Errorf("the read reached libcufile:\n%s", res.log)
	}
	if !strings.Contains(res.stderr, "served by ioctl") {
		t.Errorf("no 'served by ioctl' decision logged:\n%s", res.stderr)
	}
}

func stats(t *testing.T, path string) map[string]any {
	t.Helper()
	s, err := s3gds.Stats(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func number(t *testing.T, m map[string]any, keys ...string) int64 {
	t.Helper()
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = mm[k]
	}
	f, _ := v.(float64)
	return int64(f)
}

func TestCuFileThroughMount(t *testing.T) {
	r := setup(t)
	o := func(n int64) string { return strconv.FormatInt(n, 10) }
	fileBefore, rootBefore := stats(t, r.obj), stats(t, r.mp)

	// Reads through the ioctl: args after the command are PATH OFF LEN BOFF.
	var delivered int64
	for _, c := range []struct {
		name          string
		off, len, dst int64
		want          int64
		opts          []string
	}{
		{"whole file", 0, objSize, 0, objSize, nil},
		{"range, unaligned destination", 123457, 2<<20 + 13, 4097, 2<<20 + 13, nil},
		{"registered buffer", 1000, 3 << 20, 1, 3 << 20, []string{"reg"}},
		{"registered buffer, 7 reads", 1000, 3<<20 + 5, 3, 3<<20 + 5, []string{"reg", "chunks=7"}},
		{"4 threads", 0, objSize, 513, objSize, []string{"reg", "threads=4"}},
		{"past the end, short", objSize - 100, 4096, 3, 100, nil},
		{"past the end, nothing", objSize + 10, 4096, 0, 0, nil},
		{"async", 77, 1 << 20, 9, 1 << 20, []string{"async"}},
		{"batch of 5", 0, objSize, 0, objSize, []string{"reg", "batch", "chunks=5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := r.run(t, r.fakes, nil, append([]string{"read", r.obj, o(c.off), o(c.len), o(c.dst)}, c.opts...)...)
			checkRead(t, res, c.want, objBytes, c.off)
			served(t, res)
			delivered += c.want
		})
	}

	t.Run("counted as GPU reads", func(t *testing.T) {
		file, root := stats(t, r.obj), stats(t, r.mp)
		if got := number(t, file, "counters", "gpu_http_bytes") - number(t, fileBefore, "counters", "gpu_http_bytes"); got != delivered {
			t.Errorf("file gpu_http_bytes grew by %d, want %d", got, delivered)
		}
		if got := number(t, file, "counters", "gpu_reads") - number(t, fileBefore, "counters", "gpu_reads"); got < 9 {
			t.Errorf("file gpu_reads grew by %d, want at least 9", got)
		}
		if got := number(t, file, "counters", "posix_read_bytes") - number(t, fileBefore, "counters", "posix_read_bytes"); got != 0 {
			t.Errorf("file posix_read_bytes grew by %d: reads went through read(2)", got)
		}
		if got := number(t, root, "gpu_read_bytes_total", "http") - number(t, rootBefore, "gpu_read_bytes_total", "http"); got != delivered {
			t.Errorf("mount gpu_read_bytes_total{http} grew by %d, want %d", got, delivered)
		}
		if got := number(t, root, "posix_read_bytes_total") - number(t, rootBefore, "posix_read_bytes_total"); got != 0 {
			t.Errorf("mount posix_read_bytes_total grew by %d: reads went through read(2)", got)
		}
	})

	t.Run("local file goes to libcufile", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "read", r.local, "5", "200000", "11", "reg")
		checkRead(t, res, 200000, func(off int64, n int) []byte { return r.localData[off : off+int64(n)] }, 5)
		for _, want := range []string{"cuFileDriverOpen", "cuFileBufRegister", "cuFileHandleRegister fd=",
			"cuFileRead fd=3 size=200000 off=5 boff=11 -> 200000", "cuFileHandleDeregister fd=3", "cuFileDriverClose_v2"} {
			if !strings.Contains(res.log, want) {
				t.Errorf("libcufile's log lacks %q:\n%s", want, res.log)
			}
		}
	})

	t.Run("local file, batch, to libcufile", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "read", r.local, "0", "300001", "0", "batch", "chunks=3")
		checkRead(t, res, 300001, func(off int64, n int) []byte { return r.localData[off : off+int64(n)] }, 0)
		if !strings.Contains(res.log, "cuFileBatchIOSubmit 3") {
			t.Errorf("libcufile's log lacks the batch:\n%s", res.log)
		}
	})

	t.Run("handle never registered", func(t *testing.T) {
		// Passed on to libcufile, which answers; without it, the library.
		res := r.run(t, r.fakes, nil, "badhandle")
		if got := res.int(t, "ret"); got != -5027 {
			t.Errorf("ret = %d, want -CU_FILE_HANDLE_NOT_REGISTERED (-5027)", got)
		}
		if !strings.Contains(res.log, "cuFileRead unknown handle") {
			t.Errorf("the handle was not passed on to libcufile:\n%s", res.log)
		}
		res = r.run(t, r.nocufile, nil, "badhandle")
		if got := res.int(t, "ret"); got != -5027 {
			t.Errorf("without libcufile: ret = %d, want -CU_FILE_HANDLE_NOT_REGISTERED (-5027)", got)
		}
	})

	t.Run("handle deregistered", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "deregistered", r.obj)
		if got := res.int(t, "ret"); got != -5027 {
			t.Errorf("ret = %d, want -CU_FILE_HANDLE_NOT_REGISTERED (-5027)", got)
		}
	})

	t.Run("past the end of the allocation", func(t *testing.T) {
		for _, reg := range []string{"", "reg"} {
			res := r.run(t, r.fakes, nil, "read", r.obj, "0", "8192", "100", "alloc=8192", reg)
			if got := res.int(t, "ret"); got != -5014 {
				t.Errorf("%s: ret = %d, want -CU_FILE_CUDA_POINTER_RANGE_ERROR (-5014)", reg, got)
			}
			if res.kv["guard"] != "ok" || strings.Contains(res.log, "cuFileRead") {
				t.Errorf("%s: the buffer was written, or libcufile read:\n%s", reg, res.log)
			}
		}
	})

	t.Run("closed descriptor", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "badfd")
		if got := res.int(t, "register"); got != 5022 {
			t.Errorf("register = %d, want libcufile's CU_FILE_INVALID_VALUE (5022)", got)
		}
	})

	t.Run("no libcuda: libcufile reads", func(t *testing.T) {
		res := r.run(t, r.fakes, []string{"S3GDSFS_CUFILE_LIBCUDA=/nonexistent/libcuda.so.1"},
			"read", r.obj, "4096", "65536", "1")
		checkRead(t, res, 65536, objBytes, 4096)
		if !strings.Contains(res.stderr, "libcuda.so.1 is not usable") {
			t.Errorf("stderr does not say libcuda is missing:\n%s", res.stderr)
		}
		if !strings.Contains(res.log, "cuFileRead fd=3 size=65536 off=4096 boff=1 -> 65536") {
			t.Errorf("libcufile did not read:\n%s", res.log)
		}
	})

	t.Run("no IPC handle: libcufile reads", func(t *testing.T) {
		res := r.run(t, r.fakes, []string{"FAKE_CUDA_NO_IPC=1"}, "read", r.obj, "10", "1000", "0")
		checkRead(t, res, 1000, objBytes, 10)
		if !strings.Contains(res.log, "cuFileRead fd=3 size=1000") {
			t.Errorf("libcufile did not read:\n%s", res.log)
		}
	})

	t.Run("no libcufile: mount files served", func(t *testing.T) {
		res := r.run(t, r.nocufile, nil, "read", r.obj, "999", "1000000", "17", "reg")
		checkRead(t, res, 1000000, objBytes, 999)
		served(t, res)
		if !strings.Contains(res.stderr, "NVIDIA's libcufile is not available") {
			t.Errorf("stderr does not say libcufile is missing:\n%s", res.stderr)
		}
		if n := strings.Count(res.stderr, "NVIDIA's libcufile is not available"); n != 1 {
			t.Errorf("the missing libcufile is reported %d times, want once", n)
		}
	})

	t.Run("no libcufile: local file refused", func(t *testing.T) {
		res := r.run(t, r.nocufile, nil, "read", r.local, "0", "100", "0")
		if got := res.int(t, "register"); got != 5001 {
			t.Errorf("register = %d, want CU_FILE_DRIVER_NOT_INITIALIZED (5001)", got)
		}
		if !strings.Contains(res.stderr, "calls for other files answer CU_FILE_DRIVER_NOT_INITIALIZED") {
			t.Errorf("stderr does not explain:\n%s", res.stderr)
		}
	})

	t.Run("no libcufile, no libcuda", func(t *testing.T) {
		env := []string{"S3GDSFS_CUFILE_LIBCUDA=/nonexistent/libcuda.so.1"}
		res := r.run(t, r.nocufile, env, "read", r.obj, "0", "100", "0")
		if got := res.int(t, "ret"); got != -5011 {
			t.Errorf("ret = %d, want -CU_FILE_CUDA_DRIVER_ERROR (-5011)", got)
		}
		if !strings.Contains(res.stderr, "libcuda.so.1 is not usable") {
			t.Errorf("stderr does not say libcuda is missing:\n%s", res.stderr)
		}
		res = r.run(t, r.nocufile, env, "read", r.obj, "0", "100", "0", "reg")
		if got := res.int(t, "bufregister"); got != 5011 {
			t.Errorf("bufregister = %d, want CU_FILE_CUDA_DRIVER_ERROR (5011)", got)
		}
	})

	t.Run("installed as libcufile.so.0, S3GDSFS_CUFILE_REAL", func(t *testing.T) {
		env := []string{"S3GDSFS_CUFILE_REAL=" + filepath.Join(r.fakes, "libcufile.so.0")}
		res := r.run(t, r.nocufile, env, "read", r.local, "100", "5000", "7")
		checkRead(t, res, 5000, func(off int64, n int) []byte { return r.localData[off : off+int64(n)] }, 100)
		if !strings.Contains(res.log, "cuFileRead fd=3 size=5000 off=100 boff=7 -> 5000") {
			t.Errorf("libcufile did not read:\n%s", res.log)
		}
		res = r.run(t, r.nocufile, env, "read", r.obj, "100", "5000", "7")
		checkRead(t, res, 5000, objBytes, 100)
		served(t, res)
	})
}

// TestCuFileDestinationCache: the allocation a read goes into is looked up
// once, not on every read, and memory freed and allocated again at the same
// address is told from the old.
func TestCuFileDestinationCache(t *testing.T) {
	r := setup(t)
	o := func(n int64) string { return strconv.FormatInt(n, 10) }
	noID := []string{"FAKE_CUDA_NO_BUFFER_ID=1"}

	t.Run("16 reads of one unregistered buffer: one lookup", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "read", r.obj, "0", o(objSize), "4097", "chunks=16")
		checkRead(t, res, objSize, objBytes, 0)
		served(t, res)
		c := res.cudaCalls(t)
		if c.ipcHandle != 1 || c.addressRange != 0 {
			t.Errorf("cuIpcGetMemHandle %d, cuMemGetAddressRange_v2 %d times for 16 reads; want 1 and 0", c.ipcHandle, c.addressRange)
		}
		// The buffer's ID is asked on every read, one call each.
		if c.attributes != 16 {
			t.Errorf("cuPointerGetAttributes %d times for 16 reads, want 16", c.attributes)
		}
		if n := strings.Count(res.stderr, "(cached allocation)"); n != 15 {
			t.Errorf("%d reads used the cached allocation, want 15:\n%s", n, res.stderr)
		}
	})

	t.Run("16 reads, no buffer IDs: one lookup", func(t *testing.T) {
		res := r.run(t, r.fakes, noID, "read", r.obj, "0", o(objSize), "3", "chunks=16")
		checkRead(t, res, objSize, objBytes, 0)
		served(t, res)
		if c := res.cudaCalls(t); c.ipcHandle != 1 || c.addressRange != 1 {
			t.Errorf("cuIpcGetMemHandle %d, cuMemGetAddressRange_v2 %d times for 16 reads; want 1 and 1", c.ipcHandle, c.addressRange)
		}
	})

	t.Run("8 threads, 64 KiB reads of one buffer", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "read", r.obj, "0", o(objSize), "11", "task=65536", "threads=8")
		checkRead(t, res, objSize, objBytes, 0)
		served(t, res)
		// 81 reads; threads that miss together may each look it up.
		if c := res.cudaCalls(t); c.ipcHandle < 1 || c.ipcHandle > 8 || c.addressRange != 0 {
			t.Errorf("cuIpcGetMemHandle %d, cuMemGetAddressRange_v2 %d times for 81 reads on 8 threads; want 1-8 and 0",
				c.ipcHandle, c.addressRange)
		}
	})

	// The daemon keeps the old allocation's import while the file is open,
	// so a stale handle would land the bytes there, not in the new memory:
	// the buffer ID tells them apart before the read.
	t.Run("freed and allocated again at the same address", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "read", r.obj, "1000", o(2<<20), "5", "realloc=read")
		if got := res.int(t, "first"); got != 2<<20 {
			t.Fatalf("first read = %d, want %d", got, 2<<20)
		}
		if res.kv["same_addr"] != "1" {
			t.Fatalf("the fake libcuda did not reuse the address: the case is not tested")
		}
		checkRead(t, res, 2<<20, objBytes, 1000)
		served(t, res)
		if c := res.cudaCalls(t); c.ipcHandle != 2 {
			t.Errorf("cuIpcGetMemHandle %d times for two allocations, want 2", c.ipcHandle)
		}
	})

	// Without buffer IDs, a stale handle the daemon cannot open (EBADF) is
	// looked up again and the read retried once.
	t.Run("stale handle, EBADF: looked up again", func(t *testing.T) {
		res := r.run(t, r.fakes, noID, "read", r.obj, "77", o(1<<20), "9", "realloc=prime")
		if got := res.int(t, "first"); got != -5014 {
			t.Fatalf("priming read = %d, want -CU_FILE_CUDA_POINTER_RANGE_ERROR (-5014)", got)
		}
		if res.kv["same_addr"] != "1" {
			t.Fatalf("the fake libcuda did not reuse the address: the case is not tested")
		}
		checkRead(t, res, 1<<20, objBytes, 77)
		served(t, res)
		if !strings.Contains(res.stderr, "was stale; looked up again") {
			t.Errorf("no retry after EBADF logged:\n%s", res.stderr)
		}
		if c := res.cudaCalls(t); c.ipcHandle != 2 || c.addressRange != 2 {
			t.Errorf("cuIpcGetMemHandle %d, cuMemGetAddressRange_v2 %d times; want 2 and 2", c.ipcHandle, c.addressRange)
		}
	})

	t.Run("registered buffer: no lookup per read", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "read", r.obj, "0", o(objSize), "1", "reg", "chunks=8")
		checkRead(t, res, objSize, objBytes, 0)
		served(t, res)
		if c := res.cudaCalls(t); c.ipcHandle != 1 || c.addressRange != 1 || c.attributes > 1 {
			t.Errorf("calls %+v for 8 reads of a registered buffer; want one lookup at registration", c)
		}
	})
}

// TestCuFileKvikioSequence runs what kvikio's CuFile.pread does at its
// defaults: cuFileDriverOpen, cuFileGetVersion, cuFileDriverGetProperties,
// the file opened O_DIRECT, cuFileHandleRegister, then the read split in
// 4 MiB tasks taken by 8 threads, each task a cuFileRead at base+offset.
func TestCuFileKvikioSequence(t *testing.T) {
	r := setup(t)
	size := strconv.FormatInt(bigSize, 10)
	kvikio := []string{"read", r.big, "0", size, "0", "odirect", "probe", "task=4194304", "threads=8"}
	var delivered int64
	before := stats(t, r.big)

	// probe checks the answers kvikio reads before it uses cuFile.
	probe := func(t *testing.T, res result, version int64) {
		t.Helper()
		for _, k := range []string{"driver_open", "version_err", "props_err", "driver_close"} {
			if got := res.int(t, k); got != 0 {
				t.Errorf("%s = %d, want CU_FILE_SUCCESS", k, got)
			}
		}
		if got := res.int(t, "version"); got != version {
			t.Errorf("version = %d, want %d", got, version)
		}
		// nvfs 0.0 is kvikio's "GDS not available".
		if res.int(t, "nvfs_major") == 0 && res.int(t, "nvfs_minor") == 0 {
			t.Errorf("nvfs version 0.0: kvikio would call GDS unavailable")
		}
	}
	readBig := func(t *testing.T, res result) {
		t.Helper()
		checkRead(t, res, bigSize, bigBytes, 0)
		served(t, res)
		if n := strings.Count(res.stderr, "-> "); n != 9 {
			t.Errorf("%d ioctls, want 9, one per 4 MiB task:\n%s", n, res.stderr)
		}
		if n := strings.Count(res.stderr, "[0, +4194304) -> 4194304 bytes"); n != 1 {
			t.Errorf("the first task was not one 4 MiB ioctl:\n%s", res.stderr)
		}
		delivered += bigSize
	}

	t.Run("installed as libcufile.so.0, no NVIDIA libcufile", func(t *testing.T) {
		res := r.run(t, r.nocufile, nil, kvikio...)
		probe(t, res, 1130)
		readBig(t, res)
		if got := res.int(t, "max_direct_io_kb"); got != 16<<10 {
			t.Errorf("max_direct_io_size = %d KiB, want GDS's default 16384", got)
		}
		if f := res.int(t, "fflags"); f&(1<<1) == 0 || f&(1<<2) == 0 {
			t.Errorf("fflags = %#x: batch (bit 1) and streams (bit 2) not said to be supported", f)
		}
	})

	t.Run("libcufile in compatibility mode (nvfs 0.0)", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, kvikio...)
		probe(t, res, 1150) // the fake libcufile's
		readBig(t, res)
	})

	t.Run("libcufile without nvidia-fs refuses the driver", func(t *testing.T) {
		res := r.run(t, r.fakes, []string{"FAKE_CUFILE_NO_NVFS=1"}, kvikio...)
		probe(t, res, 1150)
		readBig(t, res)
		if !strings.Contains(res.log, "cuFileDriverOpen") {
			t.Errorf("libcufile was not asked to open its driver:\n%s", res.log)
		}
		if got := res.int(t, "max_batch_io_size"); got != 128 {
			t.Errorf("max_batch_io_size = %d, want the library's 128", got)
		}
	})

	t.Run("counted as GPU reads", func(t *testing.T) {
		after := stats(t, r.big)
		if got := number(t, after, "counters", "gpu_http_bytes") - number(t, before, "counters", "gpu_http_bytes"); got != delivered {
			t.Errorf("gpu_http_bytes grew by %d, want %d", got, delivered)
		}
		if got := number(t, after, "counters", "posix_read_bytes") - number(t, before, "counters", "posix_read_bytes"); got != 0 {
			t.Errorf("posix_read_bytes grew by %d, want 0", got)
		}
	})
}
