package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	s3fs "github.com/s3gdsfs/s3gdsfs/fs"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// metricSum is a series of the daemon's metrics, summed over its labels.
func metricSum(t *testing.T, d *daemon.Daemon, name string) float64 {
	t.Helper()
	return metricAt(t, d, name, "")
}

// metricAt is a series of the daemon's metrics at one label value ("":
// summed over its labels).
func metricAt(t *testing.T, d *daemon.Daemon, name, label string) float64 {
	t.Helper()
	v, err := d.Metrics.Value(name, label)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func dropPageCache(t *testing.T) {
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		t.Logf("page cache not dropped (%v): the rest reads from it", err)
	}
}

// With a push slot free (--push-readers) the daemon writes what it fetches
// ahead of a reader into the kernel's page cache: the reader gets every
// byte right while the daemon answers only a small part of it through read
// requests; a page cache dropped in the middle of the read, and mmap, read
// right too. With the slot taken, a reader gets direct I/O.
func TestPushAheadFeedsReadersThroughThePageCache(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 48<<20 + 4321
	sum := srv.PutRandomObject(t, "data", "big.bin", size, 41)
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.FS.DirectIOMinSize = 4 << 20
		c.FS.PushReaders = 1
		c.Core.MetaTTL = time.Second
	})
	path := filepath.Join(mp, "big.bin")

	buf := make([]byte, 64<<10)
	n, err := syscall.Getxattr(path, "user.s3gdsfs.stats", buf)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		DirectIO  bool `json:"direct_io"`
		PushAhead bool `json:"push_ahead"`
	}
	if err := json.Unmarshal(buf[:n], &st); err != nil || !st.DirectIO || !st.PushAhead {
		t.Fatalf("stats say direct_io %v, push_ahead %v (%v): want true (when no push slot is free) and true", st.DirectIO, st.PushAhead, err)
	}

	if got := fileSHA256(t, path, 1<<20); got != sum {
		t.Fatalf("sha256 %s, want %s", got, sum)
	}
	pushed, answered := metricSum(t, d, "push_bytes_total"), posixReadBytes(t, mp)
	t.Logf("%v bytes pushed, %v answered through reads, of %d", pushed, answered, size)
	if pushed < size/2 || answered > size/2 {
		t.Fatalf("%v bytes pushed, %v answered through reads, of %d: want most pushed", pushed, answered, size)
	}

	// An O_DIRECT open reads around the page cache: it takes no slot.
	odirect, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	// (settle: the release of the read above reaches the daemon after close returns)
	if !settle(5*time.Second, func() bool { return metricSum(t, d, "push_readers") == 0 }) {
		t.Fatalf("%v pushed readers with only an O_DIRECT open, want 0", metricSum(t, d, "push_readers"))
	}
	odirect.Close()

	// While one open holds the only push slot, another file is read with
	// direct I/O: every byte through read requests, nothing pushed.
	sum2 := srv.PutRandomObject(t, "data", "big2.bin", size, 42)
	holder, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := metricSum(t, d, "push_readers"); n != 1 {
		t.Fatalf("%v pushed readers with one file open, want 1", n)
	}
	pushed, answered = metricSum(t, d, "push_bytes_total"), posixReadBytes(t, mp)
	if got := fileSHA256(t, filepath.Join(mp, "big2.bin"), 1<<20); got != sum2 {
		t.Fatalf("big2.bin: sha256 %s, want %s", got, sum2)
	}
	if p, a := metricSum(t, d, "push_bytes_total")-pushed, posixReadBytes(t, mp)-answered; p != 0 || a != size {
		t.Fatalf("second reader while the slot was taken: %v bytes pushed, %v answered, want 0 and %d", p, a, size)
	}
	holder.Close()
	if !settle(5*time.Second, func() bool { return metricSum(t, d, "push_readers") == 0 }) {
		t.Fatal("push slot not given back at close")
	}

	// Drop the page cache half way through a pushed read of a new object.
	sum2 = srv.PutRandomObject(t, "data", "big2.bin", size, 43)
	time.Sleep(1100 * time.Millisecond) // the cached name expires
	f, err := os.Open(filepath.Join(mp, "big2.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, size/2); err != nil {
		t.Fatal(err)
	}
	dropPageCache(t)
	if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum2 {
		t.Fatalf("read with the page cache dropped half way: sha256 %s, want %s", got, sum2)
	}

	// mmap, in a child process (see TestLargeObjectsUseDirectIO...).
	dropPageCache(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "S3GDSFS_TEST_MMAP_SHA256="+path)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("mmap in a child: %v (%s)", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != sum {
		t.Fatalf("mmap: sha256 %s, want %s", got, sum)
	}
	if n := metricSum(t, d, "push_failures_total"); n != 0 {
		t.Fatalf("%v push failures", n)
	}
}

// A reader of the old version that is still reading (and pushing) when the
// object is replaced and opened again never leaves old bytes for the new
// open: each version is its own inode, with its own page cache. Through the
// page cache with and without pushes.
func TestPageCacheNeverMixesVersions(t *testing.T) {
	for _, push := range []bool{true, false} {
		t.Run(map[bool]string{true: "push", false: "page-cache"}[push], func(t *testing.T) {
			pageCacheNeverMixesVersions(t, push)
		})
	}
}

func pageCacheNeverMixesVersions(t *testing.T, push bool) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 32 << 20
	srv.PutRandomObject(t, "data", "x.bin", size, 51)
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.FS.DirectIOMinSize = 4 << 20
		if push {
			c.FS.PushReaders = 1
		} else {
			c.FS.DirectIO = s3fs.DirectIONever
		}
		c.Core.MetaTTL = time.Second
	})
	path := filepath.Join(mp, "x.bin")
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	head := make([]byte, 4<<20)
	if _, err := io.ReadFull(old, head); err != nil {
		t.Fatal(err)
	}
	newSum := srv.PutRandomObject(t, "data", "x.bin", size, 52)
	time.Sleep(1100 * time.Millisecond) // the cached name expires

	// The old reader goes on (its pushes race the new open) while the new
	// version is read whole.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, old) // ESTALE or the old bytes: not checked here
	}()
	got := fileSHA256(t, path, 1<<20)
	<-done
	if got != newSum {
		t.Fatalf("new open: sha256 %s, want the new version's %s", got, newSum)
	}
	if got := fileSHA256(t, path, 1<<20); got != newSum {
		t.Fatalf("second read of the new version: sha256 %s, want %s", got, newSum)
	}
}

// Unmounting while a pushed reader is part way through its file (its pushes
// in flight) finishes within the unmount's own bound: pushes to a mount that
// is going away fail instead of waiting, and the reader sees an error, not
// a hang.
func TestUnmountDuringAPushedRead(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 64 << 20
	srv.PutRandomObject(t, "data", "big.bin", size, 61)
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.FS.DirectIOMinSize = 4 << 20
		c.FS.PushReaders = 1
	})
	f, err := os.Open(filepath.Join(mp, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < 8<<20; off += int64(len(buf)) {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, testenv.RandomBytes(61, off, len(buf))) {
			t.Fatalf("read at %d differs", off)
		}
	}
	start := time.Now()
	if err := d.Unmount(); err != nil { // busy: detached lazily
		t.Fatalf("unmount with a pushed read open: %v", err)
	}
	// Unmount tries for about a second (5 tries 200 ms apart) before it
	// detaches a busy mount; ten is slack for a busy machine, where a push
	// that waited on the mount going away would hold it without end.
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("unmount took %v", took)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.ReadAt(buf, 40<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			// Served from what the page cache already held: fine, if exact.
			if !bytes.Equal(buf, testenv.RandomBytes(61, 40<<20, len(buf))) {
				t.Fatal("read after unmount returned other bytes")
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read after unmount hangs")
	}
}

// A file read into GPU memory gives its push slot back at its first GPU
// read: GPU loaders open files only to issue ioctls on them, and with the
// slot held until close a POSIX reader beside them would never be pushed.
func TestGPUReadGivesThePushSlotBack(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 24<<20 + 777
	srv.PutRandomObject(t, "data", "gpu.bin", size, 51)
	sum := srv.PutRandomObject(t, "data", "posix.bin", size, 52)
	mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.FS.DirectIOMinSize = 4 << 20
		c.FS.PushReaders = 1
	})

	g, err := os.Open(filepath.Join(mp, "gpu.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if n := metricSum(t, d, "push_readers"); n != 1 {
		t.Fatalf("%v pushed readers with one file open, want 1 (the open takes the slot)", n)
	}
	buf := hostBuffer(t, dir, "buf", size, 0)
	if res, err := s3gds.Read(g, hostRequest(buf, 0, size, 0)); err != nil || res.Bytes != size {
		t.Fatalf("GPU read: %+v %v", res, err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, buf))
	if sha256.Sum256(got) != sha256.Sum256(testenv.RandomBytes(51, 0, size)) {
		t.Fatal("GPU read: bytes in the buffer differ from the object")
	}
	if n := metricSum(t, d, "push_readers"); n != 0 {
		t.Fatalf("%v pushed readers after the open's GPU read, want 0", n)
	}

	// With the GPU reader's file still open, a POSIX reader gets the slot.
	pushed := metricSum(t, d, "push_bytes_total")
	if got := fileSHA256(t, filepath.Join(mp, "posix.bin"), 1<<20); got != sum {
		t.Fatalf("posix.bin: sha256 %s, want %s", got, sum)
	}
	if p := metricSum(t, d, "push_bytes_total") - pushed; p < size/2 {
		t.Fatalf("%v of %d bytes pushed to a POSIX reader beside an open GPU reader's file, want most", p, size)
	}

	// The GPU reader's handle reads on through the page cache, byte exact.
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(g, 0, size)); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(testenv.RandomBytes(51, 0, size)); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("POSIX read of the GPU reader's file after its slot went: bytes differ from the object")
	}
}
