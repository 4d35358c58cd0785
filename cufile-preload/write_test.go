package cufilepreload

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

const (
	writeSize = 13<<20 + 4321 // three of the writable mount's 5 MiB parts, the last short
	writeSeed = 31
)

// writeRig is the rig with a second mount of the bucket that takes writes.
type writeRig struct {
	*rig
	wmp  string // the mount with --allow-writes
	src  string // a local file of writeSize bytes, what the program writes
	data []byte
	n    int
}

func setupWrites(t *testing.T) *writeRig {
	r := setup(t)
	w := &writeRig{rig: r, wmp: t.TempDir(), src: filepath.Join(r.work, "src.bin"),
		data: testenv.RandomBytes(writeSeed, 0, writeSize)}
	if err := os.WriteFile(w.src, w.data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := mounttest.StandinConfig(t, r.srv, "data", w.wmp, r.bufDir)
	cfg.Core.Writes.Allow = true
	cfg.Core.Writes.PartSize = 5 << 20
	mounttest.Start(t, cfg)
	return w
}

// write runs cuprog write of the first n bytes of src to a new file of the
// writable mount, from offset 4097 of the device buffer.
func (w *writeRig) write(t *testing.T, libDir string, env []string, n int64, opts ...string) (string, result) {
	t.Helper()
	w.n++
	path := filepath.Join(w.wmp, fmt.Sprintf("ckpt-%d.bin", w.n))
	args := append([]string{"write", path, "0", strconv.FormatInt(n, 10), "4097", w.src}, opts...)
	return path, w.run(t, libDir, env, args...)
}

// checkWritten checks a write of the whole source: the count, the upload's
// close, and the file read back through the mount, by sha256.
func (w *writeRig) checkWritten(t *testing.T, path string, res result) {
	t.Helper()
	if got := res.int(t, "ret"); got != writeSize {
		t.Fatalf("ret = %d (errno %s), want %d\nstderr:\n%s", got, res.kv["errno"], writeSize, res.stderr)
	}
	if got := res.int(t, "close"); got != 0 {
		t.Fatalf("close = errno %d: the upload failed", got)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writeSize || sum(got) != sum(w.data) {
		t.Fatalf("read back %d bytes, sha256 %s; wrote %d, sha256 %s", len(got), sum(got), writeSize, sum(w.data))
	}
}

// servedWrite checks that the writes went through the ioctl, ioctls of
// them: libcufile saw no handle and no write.
func servedWrite(t *testing.T, res result, ioctls int) {
	t.Helper()
	if strings.Contains(res.log, "cuFileHandleRegister") || strings.Contains(res.log, "cuFileWrite") {
		t.Errorf("the write reached libcufile:\n%s", res.log)
	}
	if !strings.Contains(res.stderr, "served by ioctl") {
		t.Errorf("no 'served by ioctl' decision logged:\n%s", res.stderr)
	}
	if n := strings.Count(res.stderr, " bytes over http"); n != ioctls {
		t.Errorf("%d write ioctls took bytes, want %d:\n%s", n, ioctls, res.stderr)
	}
}

func wantFailure(t *testing.T, res result, retKey, errnoKey string, errno int64, what string) {
	t.Helper()
	if got, e := res.int(t, retKey), res.int(t, errnoKey); got != -1 || e != errno {
		t.Errorf("%s = %d, errno %d; want -1, %s (%d)", retKey, got, e, what, errno)
	}
}

// TestCuFileWrite: cuFileWrite (and its async and batch forms) of a file on
// a mount with --allow-writes is the GPU write ioctl; the bytes land
// byte-exact, in parts, and the daemon counts them as GPU writes. Pieces
// issued at once from threads are put in order; writes the daemon cannot
// take answer as cuFile's callers expect.
func TestCuFileWrite(t *testing.T) {
	w := setupWrites(t)
	before := stats(t, w.wmp)
	var delivered int64
	var first string

	for _, c := range []struct {
		name   string
		opts   []string
		ioctls int
	}{
		{"4 writes in order", []string{"chunks=4"}, 4},
		{"registered buffer, 1 MiB tasks from 8 threads", []string{"reg", "task=1048576", "threads=8"}, 14},
		{"5 threads, the last chunk's first", []string{"chunks=5", "threads=5", "reverse"}, 5},
		{"async, 3 chunks", []string{"async", "chunks=3"}, 3},
		{"batch of 6, entries last first", []string{"batch", "chunks=6", "reverse"}, 6},
		{"O_DIRECT", []string{"odirect", "chunks=2"}, 2},
		{"O_RDWR, as PyTorch's GdsFile(path, O_CREAT|O_RDWR) opens", []string{"rdwr", "chunks=2"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, res := w.write(t, w.fakes, nil, writeSize, c.opts...)
			w.checkWritten(t, path, res)
			servedWrite(t, res, c.ioctls)
			delivered += writeSize
			if first == "" {
				first = path
			}
			if n := strings.Count(res.stderr, "waited for the writes before it"); n > 0 {
				t.Logf("%d writes waited for their turn", n)
			}
		})
	}

	// kvikio's FileHandle(path, "w") opens the file twice, the second time
	// O_DIRECT for cuFile; were that open refused, kvikio would write
	// through POSIX instead. Then its pwrite: 4 MiB tasks from 8 threads.
	t.Run("kvikio's opens and tasks", func(t *testing.T) {
		path, res := w.write(t, w.fakes, nil, writeSize, "kvikio", "task=4194304", "threads=8")
		if got := res.int(t, "open_direct"); got != 0 {
			t.Fatalf("the O_DIRECT open failed with errno %d: kvikio would not use cuFile", got)
		}
		if got := res.int(t, "close_other"); got != 0 {
			t.Fatalf("close of the descriptor without O_DIRECT = errno %d: the upload failed", got)
		}
		w.checkWritten(t, path, res)
		servedWrite(t, res, 4)
		delivered += writeSize
	})

	t.Run("no libcufile: served", func(t *testing.T) {
		path, res := w.write(t, w.nocufile, nil, writeSize, "chunks=2")
		w.checkWritten(t, path, res)
		servedWrite(t, res, 2)
		delivered += writeSize
	})

	t.Run("read back with cuFileRead", func(t *testing.T) {
		if first == "" {
			t.Skip("nothing was written")
		}
		res := w.run(t, w.fakes, nil, "read", first, "1000", strconv.Itoa(writeSize-1000), "3", "chunks=3")
		checkRead(t, res, writeSize-1000, func(off int64, n int) []byte { return w.data[off : off+int64(n)] }, 1000)
		served(t, res)
	})

	t.Run("counted as GPU writes", func(t *testing.T) {
		after := stats(t, w.wmp)
		if got := number(t, after, "write_bytes_total", "gpu_http") - number(t, before, "write_bytes_total", "gpu_http"); got != delivered {
			t.Errorf("write_bytes_total{gpu_http} grew by %d, want %d", got, delivered)
		}
		if got := number(t, after, "write_bytes_total", "posix") - number(t, before, "write_bytes_total", "posix"); got != 0 {
			t.Errorf("write_bytes_total{posix} grew by %d: writes went through write(2)", got)
		}
	})

	t.Run("mount without --allow-writes: EROFS", func(t *testing.T) {
		res := w.run(t, w.fakes, nil, "write", w.obj, "0", "100", "0", w.src, "rdonly")
		wantFailure(t, res, "ret", "errno", 30, "EROFS")
	})

	t.Run("opened read-only: EBADF", func(t *testing.T) {
		res := w.run(t, w.fakes, nil, "write", filepath.Join(w.wmp, "obj"), "0", "100", "0", w.src, "rdonly")
		wantFailure(t, res, "ret", "errno", 9, "EBADF")
	})

	// Nothing written yet, so no write can end where this one starts: it
	// waits for one, then fails as the daemon answers.
	t.Run("out of order: EINVAL", func(t *testing.T) {
		res := w.run(t, w.fakes, nil, "write", filepath.Join(w.wmp, "gap.bin"), "4096", "100", "0", w.src)
		wantFailure(t, res, "ret", "errno", 22, "EINVAL")
		if !strings.Contains(res.stderr, "out of order, no write of the handle moved") {
			t.Errorf("the refusal was not waited on and tried once more:\n%s", res.stderr)
		}
	})

	t.Run("behind the bytes written: EINVAL at once", func(t *testing.T) {
		path, res := w.write(t, w.fakes, nil, 1<<20, "chunks=2", "again")
		if got := res.int(t, "ret"); got != 1<<20 {
			t.Fatalf("ret = %d, want %d", got, 1<<20)
		}
		wantFailure(t, res, "again_ret", "again_errno", 22, "EINVAL")
		if !strings.Contains(res.stderr, "lies behind the bytes written") {
			t.Errorf("the rewrite was not refused as behind the end:\n%s", res.stderr)
		}
		got, err := os.ReadFile(path)
		if err != nil || sum(got) != sum(w.data[:1<<20]) {
			t.Errorf("read back %d bytes (%v), not the %d written", len(got), err, 1<<20)
		}
	})

	t.Run("past the end of the allocation", func(t *testing.T) {
		_, res := w.write(t, w.fakes, nil, 8192, "alloc=8192")
		if got := res.int(t, "ret"); got != -5014 {
			t.Errorf("ret = %d, want -CU_FILE_CUDA_POINTER_RANGE_ERROR (-5014)", got)
		}
		if strings.Contains(res.log, "cuFileWrite") {
			t.Errorf("libcufile wrote:\n%s", res.log)
		}
	})

	t.Run("no IPC handle: libcufile writes", func(t *testing.T) {
		posix := number(t, stats(t, w.wmp), "write_bytes_total", "posix")
		path, res := w.write(t, w.fakes, []string{"FAKE_CUDA_NO_IPC=1"}, writeSize, "chunks=2")
		w.checkWritten(t, path, res)
		if n := strings.Count(res.log, "cuFileWrite fd=3"); n != 2 {
			t.Errorf("libcufile wrote %d times, want 2:\n%s", n, res.log)
		}
		if got := number(t, stats(t, w.wmp), "write_bytes_total", "posix") - posix; got != writeSize {
			t.Errorf("write_bytes_total{posix} grew by %d, want %d", got, writeSize)
		}
	})
}
