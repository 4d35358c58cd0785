// Package integration runs the filesystem through real FUSE mounts against a
// real S3 server (versitygw, started per test).
package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// mountOf mounts bucket of srv in a temporary directory for the test.
func mountOf(t testing.TB, srv *testenv.Server, bucket string, tune func(*daemon.Config)) (string, *daemon.Daemon) {
	t.Helper()
	testenv.RequireFUSE(t)
	mp := t.TempDir()
	cfg := daemon.Config{
		Mountpoint: mp,
		S3: daemon.S3Config{
			Endpoint:    srv.Endpoint,
			Region:      srv.Region,
			Credentials: daemon.StaticCredentials(srv.AccessKey, srv.SecretKey),
		},
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cfg.Core.Bucket = bucket
	// Whether --splice=auto splices depends on the machine (fs.pipe-max-size,
	// CAP_SYS_RESOURCE): tests of splicing ask for it (splice_test.go).
	cfg.Splice = "never"
	// The mount's default on machines of 8 CPUs or more (--fuse-poll), so
	// that every test runs through the polling read of /dev/fuse.
	cfg.FS.PollRequests = time.Millisecond
	if tune != nil {
		tune(&cfg)
	}
	d, err := daemon.Start(cfg)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return mp, d
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func fileSHA256(t *testing.T, path string, bufSize int) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	// Only the reader's Read: *os.File's WriteTo would copy with buffers
	// of its own (32 KiB) and the reads would not be of bufSize.
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, make([]byte, bufSize)); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestListingOverOneThousandKeysAndDeepNesting(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	// Objects placed straight into versitygw's directory come without an
	// ETag: they exercise the size-and-mtime pin too.
	dir := filepath.Join(srv.Dir, "data", "many")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 1234
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deepKey := "a/b/c/d/e/f/g/h/i/j/k/l/leaf.txt"
	srv.PutObject(t, "data", deepKey, []byte("deep leaf\n"))
	srv.PutObject(t, "data", "empty-dir/", nil) // a directory marker object

	mp, _ := mountOf(t, srv, "data", nil)
	entries, err := os.ReadDir(filepath.Join(mp, "many"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n {
		t.Fatalf("listed %d entries, want %d", len(entries), n)
	}
	for i, e := range entries {
		if want := fmt.Sprintf("f%05d", i); e.Name() != want {
			t.Fatalf("entry %d is %s, want %s", i, e.Name(), want)
		}
	}
	// Every file's content matches (these have no ETag).
	for _, i := range []int{0, 999, 1000, n - 1} {
		got, err := os.ReadFile(filepath.Join(mp, "many", fmt.Sprintf("f%05d", i)))
		if err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("f%05d: %q, %v", i, got, err)
		}
	}
	got, err := os.ReadFile(filepath.Join(mp, deepKey))
	if err != nil || string(got) != "deep leaf\n" {
		t.Fatalf("deep leaf: %q, %v", got, err)
	}
	st, err := os.Stat(filepath.Join(mp, "a/b/c"))
	if err != nil || !st.IsDir() {
		t.Fatalf("a/b/c: %v, %v", st, err)
	}
	marker, err := os.ReadDir(filepath.Join(mp, "empty-dir"))
	if err != nil || len(marker) != 0 {
		t.Fatalf("marker directory: %v entries, %v; want an empty directory", len(marker), err)
	}
	if _, err := os.Stat(filepath.Join(mp, "a/b/missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing name: %v, want ENOENT", err)
	}
}

func TestSequentialAndRandomReadsAreByteExact(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 48<<20 + 12345
	sum := srv.PutRandomObject(t, "data", "big.bin", size, 7)
	mp, d := mountOf(t, srv, "data", nil)
	path := filepath.Join(mp, "big.bin")

	st, err := os.Stat(path)
	if err != nil || st.Size() != size {
		t.Fatalf("stat: %v %v", st, err)
	}
	if got := fileSHA256(t, path, 1<<20); got != sum {
		t.Fatalf("sequential read sha256 %s, want %s", got, sum)
	}
	// The reader started at the beginning: one whole-object GET fed it.
	snap, err := d.Metrics.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if gets := snap["s3_requests_total"].(map[string]float64)["get,ok"]; gets != 1 || snap["read_streams_total"] != 1.0 {
		t.Fatalf("sequential read of a fresh object: %v GETs, %v streams; want one of each", gets, snap["read_streams_total"])
	}
	// Random offsets and lengths, through O_DIRECT-free pread on a fresh
	// handle, against regenerated bytes.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		off := r.Int64N(size)
		n := 1 + r.IntN(300<<10)
		buf := make([]byte, n)
		got, err := f.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			t.Fatalf("pread %d@%d: %v", n, off, err)
		}
		want := testenv.RandomBytes(7, off, int(min(int64(n), size-off)))
		if !bytes.Equal(buf[:got], want) {
			t.Fatalf("pread %d@%d: bytes differ from the object", n, off)
		}
	}
	if got := posixReadBytes(t, mp); got < size {
		t.Fatalf("posix_read_bytes_total = %v after reading %d bytes", got, size)
	}
	if used := d.Core.Blocks().Stats().InUseBytes; used > d.Core.Config().MemoryLimit {
		t.Fatalf("block memory %d over the limit %d", used, d.Core.Config().MemoryLimit)
	}
}

// posixReadBytes is the daemon's count of bytes it answered read(2) with.
func posixReadBytes(t *testing.T, mp string) float64 {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := syscall.Getxattr(mp, "user.s3gdsfs.stats", buf)
	if err != nil {
		t.Fatalf("stats xattr: %v", err)
	}
	var stats map[string]any
	if err := json.Unmarshal(buf[:n], &stats); err != nil {
		t.Fatal(err)
	}
	return stats["posix_read_bytes_total"].(float64)
}

// With the default policy, objects from --direct-io-min-size up bypass the
// page cache (every open reaches the daemon) and smaller ones keep it across
// opens; a direct-I/O file still maps with mmap.
func TestLargeObjectsUseDirectIOAndSmallOnesThePageCache(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const small, large = 512 << 10, 6<<20 + 123
	smallSum := srv.PutRandomObject(t, "data", "small.bin", small, 3)
	largeSum := srv.PutRandomObject(t, "data", "large.bin", large, 4)
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) { c.FS.DirectIOMinSize = 4 << 20 })

	readTwice := func(name, sum string) float64 {
		before := posixReadBytes(t, mp)
		for range 2 {
			if got := fileSHA256(t, filepath.Join(mp, name), 1<<20); got != sum {
				t.Fatalf("%s: sha256 %s, want %s", name, got, sum)
			}
		}
		return posixReadBytes(t, mp) - before
	}
	for name, want := range map[string]bool{"small.bin": false, "large.bin": true} {
		buf := make([]byte, 64<<10)
		n, err := syscall.Getxattr(filepath.Join(mp, name), "user.s3gdsfs.stats", buf)
		if err != nil {
			t.Fatalf("%s: stats xattr: %v", name, err)
		}
		var st struct {
			DirectIO *bool `json:"direct_io"`
		}
		if err := json.Unmarshal(buf[:n], &st); err != nil || st.DirectIO == nil || *st.DirectIO != want {
			t.Errorf("%s: stats say direct_io %v (%v), want %v", name, st.DirectIO, err, want)
		}
	}
	if got := readTwice("small.bin", smallSum); got != small {
		t.Errorf("small object read twice: the daemon served %v bytes, want %d (the second open from the page cache)", got, small)
	}
	if got := readTwice("large.bin", largeSum); got != 2*large {
		t.Errorf("large object read twice: the daemon served %v bytes, want %d (direct I/O, no page cache)", got, 2*large)
	}

	// The mapping is read by a child process (TestMain's helper mode): a
	// fault on it must not wait for a daemon the same runtime may stop.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "S3GDSFS_TEST_MMAP_SHA256="+filepath.Join(mp, "large.bin"))
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Skip("this kernel refuses shared mappings of direct-I/O files (FUSE_DIRECT_IO_ALLOW_MMAP came with Linux 6.6)")
	}
	if err != nil {
		var stderr []byte
		if ee != nil {
			stderr = ee.Stderr
		}
		t.Fatalf("mmap of a direct-I/O file in a child: %v (%s)", err, stderr)
	}
	if got := strings.TrimSpace(string(out)); got != largeSum {
		t.Fatalf("mmap of a direct-I/O file: sha256 %s, want %s", got, largeSum)
	}
}

func TestConcurrentReadersOfOneFileAndOfMany(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 24 << 20
	sums := map[string]string{}
	for i := range 4 {
		key := fmt.Sprintf("obj%d", i)
		sums[key] = srv.PutRandomObject(t, "data", key, size, int64(100+i))
	}
	// A small memory limit: sixteen readers must share it without failing.
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Core.MemoryLimit = 64 << 20
		c.Core.CacheSize = 16 << 20
	})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for r := range 16 {
		key := "obj0" // eight readers of one file ...
		if r >= 8 {
			key = fmt.Sprintf("obj%d", r%4) // ... and eight spread over four
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(filepath.Join(mp, key))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			h := sha256.New()
			if _, err := io.CopyBuffer(h, f, make([]byte, 128<<10+r)); err != nil {
				errs <- fmt.Errorf("reader %d of %s: %w", r, key, err)
				return
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != sums[key] {
				errs <- fmt.Errorf("reader %d of %s: sha256 %s, want %s", r, key, got, sums[key])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if used := d.Core.Blocks().Stats().InUseBytes; used > 64<<20 {
		t.Fatalf("block memory %d over the 64 MiB limit", used)
	}
}

// An object replaced while a file is open: ranged GETs (pinned with
// If-Match) fail with ESTALE; a whole-object stream, already open on the
// old version, may deliver that version to its end. Either way every byte
// read is the old version's, never a mix, and a new open sees the new one.
func TestObjectReplacedDuringReadFailsThenNewOpenSeesNewVersion(t *testing.T) {
	for _, mode := range []string{"ranged", "stream", "splice"} {
		t.Run(mode, func(t *testing.T) {
			objectReplacedDuringRead(t, mode)
		})
	}
}

// objectReplacedDuringRead: mode is "ranged" (ranged GETs), "stream" (a
// whole-object stream) or "splice" (the stream spliced to a direct-I/O
// reader).
func objectReplacedDuringRead(t *testing.T, mode string) {
	streams := mode != "ranged"
	if mode == "splice" {
		requireSplice(t)
	}
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 64 << 20
	srv.PutRandomObject(t, "data", "x.bin", size, 1)
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Core.CacheSize = 4 << 20
		c.Core.MaxWindow = 4 << 20
		c.Core.MetaTTL = time.Second
		c.Core.NoStream = !streams
		c.FS.Debug = os.Getenv("DEBUGFUSE") != ""
		if mode == "splice" {
			c.Splice = "always"
		}
	})
	path := filepath.Join(mp, "x.bin")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(head, testenv.RandomBytes(1, 0, 1<<20)) {
		t.Fatal("first MiB differs")
	}
	newSum := srv.PutRandomObject(t, "data", "x.bin", size, 2)

	// Reading on must fail before the end (ranged GETs) or reach it (a
	// stream); every byte it returned must be the old version's.
	var got []byte
	buf := make([]byte, 1<<20)
	off := int64(1 << 20)
	var readErr error
	for {
		n, err := f.ReadAt(buf, off)
		got = append(got, buf[:n]...)
		off += int64(n)
		if err != nil {
			readErr = err
			break
		}
	}
	switch {
	case errors.Is(readErr, syscall.ESTALE):
	case streams && readErr == io.EOF && off == size:
	default:
		t.Fatalf("read after replacement ended with %v at %d, want ESTALE (or, from a stream, the end)", readErr, off)
	}
	if !streams && !errors.Is(readErr, syscall.ESTALE) {
		t.Fatalf("ranged GETs after replacement ended with %v, want ESTALE", readErr)
	}
	if !bytes.Equal(got, testenv.RandomBytes(1, 1<<20, len(got))) {
		t.Fatal("bytes returned after the replacement are not the old version's")
	}
	if spliced := metric(t, d, "splice_bytes_total"); (mode == "splice") != (spliced != "0") {
		t.Fatalf("%s: %s bytes spliced", mode, spliced)
	}
	// A new open sees the new object whole once the cached name expires.
	time.Sleep(1100 * time.Millisecond)
	if got := fileSHA256(t, path, 1<<20); got != newSum {
		t.Fatalf("reopened file sha256 %s, want the new version's %s", got, newSum)
	}
}

func TestWritesAreRefused(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "f", []byte("x"))
	mp, _ := mountOf(t, srv, "data", nil)
	if err := os.WriteFile(filepath.Join(mp, "new"), []byte("y"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("create: %v, want EROFS", err)
	}
	if _, err := os.OpenFile(filepath.Join(mp, "f"), os.O_WRONLY, 0); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("open for writing: %v, want EROFS", err)
	}
	if err := os.Mkdir(filepath.Join(mp, "d"), 0o755); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("mkdir: %v, want EROFS", err)
	}
}

func TestMountOfEveryBucketAndPrefixRoot(t *testing.T) {
	srv := testenv.Start(t)
	for _, b := range []string{"alpha", "beta"} {
		srv.CreateBucket(t, b)
		srv.PutObject(t, b, "p/q/file", []byte(b))
	}
	mp, _ := mountOf(t, srv, "", nil)
	entries, err := os.ReadDir(mp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "alpha,beta" {
		t.Fatalf("top level %v, want the two buckets", names)
	}
	got, err := os.ReadFile(filepath.Join(mp, "beta", "p", "q", "file"))
	if err != nil || string(got) != "beta" {
		t.Fatalf("beta/p/q/file: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(mp, "gamma")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing bucket: %v", err)
	}
	mp2, _ := mountOf(t, srv, "alpha", func(c *daemon.Config) { c.Core.Prefix = "p/" })
	got, err = os.ReadFile(filepath.Join(mp2, "q", "file"))
	if err != nil || string(got) != "alpha" {
		t.Fatalf("prefix root q/file: %q %v", got, err)
	}
}

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

// A reader of the old version that is still reading when the object is
// replaced and opened again never leaves old bytes for the new open through
// the page cache: each version is its own inode, with its own page cache.
func TestPageCacheNeverMixesVersions(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 32 << 20
	srv.PutRandomObject(t, "data", "x.bin", size, 51)
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.FS.DirectIOMinSize = 4 << 20
		c.FS.DirectIO = vfs.DirectIONever
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

	// The old reader goes on (racing the new open) while the new version
	// is read whole.
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

// df sees a large filesystem with nothing used (not 100% full), and
// directories have the mount's start for their times, atime too.
func TestStatfsAndDirectoryTimesAreSane(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "d/x", []byte("x"))
	before := time.Now().Add(-time.Second)
	mp, _ := mountOf(t, srv, "data", nil)
	after := time.Now().Add(time.Second)

	var st syscall.Statfs_t
	if err := syscall.Statfs(mp, &st); err != nil {
		t.Fatal(err)
	}
	size := st.Blocks * uint64(st.Frsize)
	if st.Blocks == 0 || st.Bfree != st.Blocks || st.Bavail != st.Blocks || size < 1<<40 || size > 1<<52 {
		t.Errorf("statfs: blocks %d free %d avail %d of %d bytes: want a large size (1 TiB to 4 PiB), all of it free", st.Blocks, st.Bfree, st.Bavail, st.Frsize)
	}
	if st.Files == 0 || st.Ffree != st.Files {
		t.Errorf("statfs: files %d free %d: want all free", st.Files, st.Ffree)
	}
	for _, dir := range []string{mp, filepath.Join(mp, "d")} {
		var s syscall.Stat_t
		if err := syscall.Stat(dir, &s); err != nil {
			t.Fatal(err)
		}
		for name, ts := range map[string]syscall.Timespec{"atime": s.Atim, "mtime": s.Mtim, "ctime": s.Ctim} {
			if tm := time.Unix(ts.Unix()); tm.Before(before) || tm.After(after) {
				t.Errorf("%s: %s %v, want the mount's start (%v to %v)", dir, name, tm, before, after)
			}
		}
	}
}

// A key the server lists under a name it cannot GET back (versitygw lists
// "ctl\x01.txt" as "ctl\uFFFD.txt") is not shown, and is counted as skipped:
// every name listed opens, and the replacement name is not found.
func TestListedNamesWithReplacementCharAreSkipped(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "ctl\x01.txt", []byte("control"))
	srv.PutObject(t, "data", "ok.txt", []byte("fine"))
	mp, d := mountOf(t, srv, "data", nil)

	ents, err := os.ReadDir(mp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if strings.ContainsRune(e.Name(), '\uFFFD') {
			t.Errorf("listed %q, a name no GET finds", e.Name())
			continue
		}
		if _, err := os.ReadFile(filepath.Join(mp, e.Name())); err != nil {
			t.Errorf("listed %q, and it does not read: %v", e.Name(), err)
		}
	}
	t.Logf("listed %q", names)
	if !slices.Contains(names, "ok.txt") {
		t.Errorf("listed %q, without ok.txt", names)
	}
	if _, err := os.Stat(filepath.Join(mp, "ctl\uFFFD.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat of the replacement name: %v, want ENOENT", err)
	}
	if !slices.Contains(names, "ctl\x01.txt") { // the server mangled it: counted
		if got := metricAt(t, d, "skipped_keys_total", "replacement_char"); got != 1 {
			t.Errorf("skipped keys {replacement_char} = %v, want 1", got)
		}
	}
}
