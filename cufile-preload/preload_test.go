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
	local     string // a file of the local disk
	localData []byte
	work      string
	runs      int
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
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", objSize, objSeed)
	r.bufDir = t.TempDir()
	r.mp = t.TempDir()
	mounttest.Standin(t, srv, "data", r.mp, r.bufDir)
	r.obj = filepath.Join(r.mp, "obj")
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

	t.Run("write to the mount", func(t *testing.T) {
		res := r.run(t, r.fakes, nil, "write", r.obj)
		if got, errno := res.int(t, "ret"), res.int(t, "errno"); got != -1 || errno != 30 {
			t.Errorf("ret, errno = %d, %d; want -1, EROFS (30)", got, errno)
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
