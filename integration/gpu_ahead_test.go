package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// A child that reads the inherited file in order (the killed caller below).
func init() {
	if os.Getenv("S3GDSFS_TEST_AHEAD_CHILD") != "" {
		os.Exit(childReadInOrder())
	}
}

// childReadInOrder reads fd 3 from 0 to S3GDSFS_TEST_LENGTH in ioctls of
// S3GDSFS_TEST_STEP bytes, each at S3GDSFS_TEST_DST plus its offset in the
// buffer S3GDSFS_TEST_BUF, and exits with the errno of the first failure;
// with S3GDSFS_TEST_AHEAD_PAUSE it then says "ready" and waits.
func childReadInOrder() int {
	f := os.NewFile(3, "inherited")
	num := func(name string) uint64 {
		v, _ := strconv.ParseUint(os.Getenv(name), 10, 64)
		return v
	}
	size, step, dst := num("S3GDSFS_TEST_LENGTH"), num("S3GDSFS_TEST_STEP"), num("S3GDSFS_TEST_DST")
	for off := uint64(0); off < size; off += step {
		if _, err := s3gds.Read(f, hostRequest(os.Getenv("S3GDSFS_TEST_BUF"), off, min(step, size-off), dst+off)); err != nil {
			var en unix.Errno
			if errors.As(err, &en) {
				return int(en)
			}
			return 255
		}
	}
	if os.Getenv("S3GDSFS_TEST_AHEAD_PAUSE") != "" {
		// Done reading, the file open: wait, outside any read, to be killed.
		fmt.Println("ready")
		time.Sleep(time.Hour)
	}
	return 0
}

// aheadMount mounts bucket with the host stand-in and a ring of 64 slots
// of 1 MiB, so that readahead may hold 32 MiB, and a window of window.
func aheadMount(t *testing.T, srv *testenv.Server, window int64, tune func(*daemon.Config), parts ...mounttest.Part) (string, string, *daemon.Daemon) {
	t.Helper()
	return gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.GPU.Staging.Slots = 64
		c.GPU.ReadAhead = window
		if tune != nil {
			tune(c)
		}
	}, parts...)
}

// countedGets counts the GETs of object bytes sent (an open's own requests
// are HEADs and listings, not counted).
type countedGets struct {
	objstore.Store
	n atomic.Int64
}

func (c *countedGets) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	c.n.Add(1)
	return c.Store.GetRange(ctx, bucket, key, off, n, v)
}

// readFileInOrder reads [from, to) of f in ioctls of step bytes, each into
// buf at dst plus its object offset; every result must be the whole step
// over HTTP.
func readFileInOrder(t *testing.T, f *os.File, buf string, from, to, step, dst uint64) {
	t.Helper()
	for off := from; off < to; off += step {
		n := min(step, to-off)
		res, err := s3gds.Read(f, hostRequest(buf, off, n, dst+off))
		if err != nil {
			t.Fatalf("GPU read at %d: %v", off, err)
		}
		if res.Bytes != n || res.HTTPBytes != n || res.RDMABytes != 0 {
			t.Fatalf("GPU read at %d: %+v, want %d bytes over http", off, res, n)
		}
	}
}

// checkLanded fails unless the buffer holds want at dst and fill around it.
func checkLanded(t *testing.T, dir, buf string, dst int, want []byte, fill byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, buf))
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got[dst:dst+len(want)]) != sha256.Sum256(want) {
		t.Fatal("bytes in the buffer differ from the object's")
	}
	if !bytes.Equal(got[:dst], bytes.Repeat([]byte{fill}, dst)) || !bytes.Equal(got[dst+len(want):], bytes.Repeat([]byte{fill}, len(got)-dst-len(want))) {
		t.Fatal("bytes outside the destination were written")
	}
}

// ringBack waits until device 0's ring has every slot back and readahead
// holds none.
func ringBack(t *testing.T, d *daemon.Daemon, when string) {
	t.Helper()
	st, err := d.GPU.Stager(0)
	if err != nil {
		t.Fatal(err)
	}
	var held, copying int
	var ahead float64
	if !settle(15*time.Second, func() bool {
		held, copying = st.Busy()
		ahead = metricAt(t, d, "gpu_read_ahead_slots", "")
		return held == 0 && copying == 0 && ahead == 0
	}) {
		t.Fatalf("%s: slots out of the ring: %d held, %d copying, %v held by readahead", when, held, copying, ahead)
	}
}

// One handle read in order in ioctls of 1 MiB sends far fewer GETs than
// ioctls (one per quarter of the 32 MiB window once it has grown), lands every byte and nothing outside its destination, counts the
// bytes as HTTP bytes, and its close gives every slot back.
func TestGPUAheadInOrderReadsSendFewGETs(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, step, dst, fill = 64<<20 + 333, 1 << 20, 4096 + 7, 0x5A
	srv.PutRandomObject(t, "data", "obj", size, 41)
	gets := &countedGets{}
	mp, dir, d := aheadMount(t, srv, 32<<20, func(c *daemon.Config) { c.GPU.Staging.Slots = 96 },
		mounttest.WrapStore(func(s objstore.Store) objstore.Store { gets.Store = s; return gets }))
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "buf", size+2*dst, fill)
	readFileInOrder(t, f, buf, 0, size, step, dst)
	checkLanded(t, dir, buf, dst, testenv.RandomBytes(41, 0, size), fill)
	ioctls := int64((size + step - 1) / step)
	t.Logf("%d ioctls, %d GETs", ioctls, gets.n.Load())
	if g := gets.n.Load(); g > ioctls/4 {
		t.Fatalf("%d GETs for %d ioctls in order: not read ahead", g, ioctls)
	}
	if got := metricAt(t, d, "gpu_read_bytes_total", "http"); got != size {
		t.Fatalf("gpu_read_bytes_total{http} = %v, want %d", got, size)
	}
	if served := metricAt(t, d, "gpu_read_ahead_served_bytes_total", ""); served < size/2 {
		t.Fatalf("gpu_read_ahead_served_bytes_total = %v of %d read", served, size)
	}
	f.Close()
	ringBack(t, d, "after the close")
}

// One handle read as a pool of threads taking 1 MiB tasks in turn reads
// it (kvikio's): in order, but with tasks that arrive out of it, here
// every pair after the first four swapped. Readahead follows them (a read
// in what it holds, or ahead of the last within its window, belongs to the
// stream) rather than dropping what it fetched at each: as few GETs as
// reads in order need, most bytes served from it, none dropped, every
// byte landed.
func TestGPUAheadFollowsTasksArrivingOutOfOrder(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, step = 64 << 20, 1 << 20
	srv.PutRandomObject(t, "data", "obj", size, 44)
	gets := &countedGets{}
	mp, dir, d := aheadMount(t, srv, 32<<20, func(c *daemon.Config) { c.GPU.Staging.Slots = 96 },
		mounttest.WrapStore(func(s objstore.Store) objstore.Store { gets.Store = s; return gets }))
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "buf", size, 0)
	var order []uint64 // 0, 1, 2, 3, then 5, 4, 7, 6, ...
	for i := uint64(0); i < size/step; i++ {
		j := i
		if i >= 4 {
			j = i ^ 1
		}
		order = append(order, j*step)
	}
	for _, off := range order {
		if res, err := s3gds.Read(f, hostRequest(buf, off, step, off)); err != nil || res.Bytes != step {
			t.Fatalf("GPU read at %d: %+v, %v", off, res, err)
		}
	}
	checkLanded(t, dir, buf, 0, testenv.RandomBytes(44, 0, size), 0)
	ioctls := int64(len(order))
	served := metricAt(t, d, "gpu_read_ahead_served_bytes_total", "")
	dropped := metricAt(t, d, "gpu_read_ahead_dropped_bytes_total", "")
	t.Logf("%d ioctls, every pair after the first four swapped: %d GETs, %v bytes served from readahead, %v dropped",
		ioctls, gets.n.Load(), served, dropped)
	if g := gets.n.Load(); g > ioctls/4 {
		t.Errorf("%d GETs for %d ioctls: readahead did not follow the tasks out of order", g, ioctls)
	}
	if served < size*3/4 || dropped != 0 {
		t.Errorf("%v of %d bytes served from readahead, %v dropped: want most served and none dropped", served, size, dropped)
	}
	f.Close()
	ringBack(t, d, "after the close")
}

// Off (--gpu-read-ahead 0), every ioctl sends its own GETs: the count
// above is readahead's doing.
func TestGPUAheadOffSendsAGETPerIoctl(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, step = 16 << 20, 1 << 20
	srv.PutRandomObject(t, "data", "obj", size, 42)
	gets := &countedGets{}
	mp, dir, d := aheadMount(t, srv, 0, nil, mounttest.WrapStore(func(s objstore.Store) objstore.Store { gets.Store = s; return gets }))
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "buf", size, 0)
	readFileInOrder(t, f, buf, 0, size, step, 0)
	checkLanded(t, dir, buf, 0, testenv.RandomBytes(42, 0, size), 0)
	if g := gets.n.Load(); g < size/step {
		t.Fatalf("%d GETs for %d ioctls with readahead off", g, size/step)
	}
	if got := metricAt(t, d, "gpu_read_ahead_bytes_total", ""); got != 0 {
		t.Fatalf("%v bytes read ahead with readahead off", got)
	}
}

// Two handles on one file, one reading in order with a seek back and one
// forward, the other reading the whole object in one ioctl at a time beside
// it (wanting more of the ring than readahead leaves), and a second process
// reading in order through a third handle: every byte of every reader
// lands, and the ring is whole once the files close.
func TestGPUAheadSeeksAndSharedFile(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 40 << 20
	srv.PutRandomObject(t, "data", "obj", size, 43)
	object := testenv.RandomBytes(43, 0, size)
	mp, dir, d := aheadMount(t, srv, 16<<20, func(c *daemon.Config) { c.GPU.Staging.Slots = 24 })
	open := func() *os.File {
		f, err := os.Open(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f1, f2, f3 := open(), open(), open()
	bufA, bufB, bufC := hostBuffer(t, dir, "a", size, 0), hostBuffer(t, dir, "b", size, 0), hostBuffer(t, dir, "c", size, 0)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "S3GDSFS_TEST_AHEAD_CHILD=1", "S3GDSFS_TEST_BUF="+bufC,
		fmt.Sprintf("S3GDSFS_TEST_LENGTH=%d", size), "S3GDSFS_TEST_STEP=786432", "S3GDSFS_TEST_DST=0")
	child.ExtraFiles = []*os.File{f3}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			whole := hostBuffer(t, dir, fmt.Sprintf("whole%d", i%2), size, 0)
			if res, err := s3gds.Read(f2, hostRequest(whole, 0, size, 0)); err != nil || res.Bytes != size {
				errs <- fmt.Errorf("whole-object read: %+v %v", res, err)
				return
			}
			if got, _ := os.ReadFile(filepath.Join(dir, whole)); sha256.Sum256(got) != sha256.Sum256(object) {
				errs <- errors.New("whole-object read: bytes differ from the object's")
				return
			}
		}
	}()
	readFileInOrder(t, f1, bufA, 0, 12<<20, 1<<20, 0)
	readFileInOrder(t, f1, bufA, 2<<20, 6<<20, 1<<20, 0)      // back
	readFileInOrder(t, f1, bufA, 24<<20, size, 1<<20, 0)      // forward
	readFileInOrder(t, f1, bufA, 12<<20, 24<<20, 1300<<10, 0) // the hole, in odd steps
	readFileInOrder(t, f1, bufB, 0, size, 3<<20+4096, 0)      // again, into another buffer
	close(stop)
	wg.Wait()
	if err := child.Wait(); err != nil {
		t.Fatalf("the second process's reads in order: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkLanded(t, dir, bufA, 0, object, 0)
	checkLanded(t, dir, bufB, 0, object, 0)
	checkLanded(t, dir, bufC, 0, object, 0)
	if metricAt(t, d, "gpu_read_ahead_dropped_bytes_total", "") == 0 {
		t.Fatal("seeks dropped nothing read ahead")
	}
	if metricAt(t, d, "gpu_read_ahead_served_bytes_total", "") == 0 {
		t.Fatal("nothing was served from readahead")
	}
	f1.Close()
	f2.Close()
	f3.Close()
	ringBack(t, d, "after the files closed")
}

// The object replaced while a handle reads it in order: every read that
// succeeds lands the opened version's bytes, the first that cannot is
// ESTALE, and readahead gives its slots back then, the file still open.
func TestGPUAheadObjectReplacedIsStaleNeverMixed(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, step = 64 << 20, 1 << 20
	srv.PutRandomObject(t, "data", "obj", size, 44)
	mp, dir, d := aheadMount(t, srv, 8<<20, nil)
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "buf", size, 0)
	readFileInOrder(t, f, buf, 0, 8<<20, step, 0)
	if metricAt(t, d, "gpu_read_ahead_bytes_total", "") == 0 {
		t.Fatal("nothing read ahead before the replacement")
	}
	srv.PutRandomObject(t, "data", "obj", size, 45)
	off := uint64(8 << 20)
	var stale error
	for ; off < size; off += step {
		if _, err := s3gds.Read(f, hostRequest(buf, off, step, off)); err != nil {
			stale = err
			break
		}
	}
	if !errors.Is(stale, unix.ESTALE) {
		t.Fatalf("reading on after the replacement: %v at %d, want ESTALE before the end", stale, off)
	}
	got, _ := os.ReadFile(filepath.Join(dir, buf))
	if sha256.Sum256(got[:off]) != sha256.Sum256(testenv.RandomBytes(44, 0, int(off))) {
		t.Fatal("reads that succeeded landed bytes that are not the opened version's")
	}
	ringBack(t, d, "after the ESTALE, the file open")
}

// cutStore breaks the first readahead GET's body after some bytes and
// stalls the second's (until its stall guard gives it up): GETs that
// start past the object's first MiB are readahead's here.
type cutStore struct {
	objstore.Store
	n           atomic.Int64
	cut, stalls atomic.Int64
}

func (s *cutStore) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	body, err := s.Store.GetRange(ctx, bucket, key, off, n, v)
	if err != nil || off < 2<<20 || n < 512<<10 {
		return body, err
	}
	switch s.n.Add(1) {
	case 1:
		s.cut.Add(1)
		return &brokenBody{ReadCloser: body, left: 300 << 10}, nil
	case 2:
		s.stalls.Add(1)
		return &brokenBody{ReadCloser: body, left: 200 << 10, stall: ctx}, nil
	}
	return body, nil
}

// brokenBody gives left bytes, then fails, or with stall waits until the
// GET is given up.
type brokenBody struct {
	io.ReadCloser
	left  int
	stall context.Context
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		if b.stall != nil {
			<-b.stall.Done()
			return 0, b.stall.Err()
		}
		return 0, fmt.Errorf("cut: %w", io.ErrUnexpectedEOF)
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

// A readahead GET cut in the middle, and one that stalls, are asked again
// from where they stopped: every byte lands.
func TestGPUAheadGETCutOrStalledMidReadahead(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, step = 32 << 20, 1 << 20
	srv.PutRandomObject(t, "data", "obj", size, 46)
	cs := &cutStore{}
	mp, dir, d := aheadMount(t, srv, 8<<20, func(c *daemon.Config) { c.Read.ReadTimeout = time.Second },
		mounttest.WrapStore(func(s objstore.Store) objstore.Store { cs.Store = s; return cs }))
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	buf := hostBuffer(t, dir, "buf", size, 0)
	readFileInOrder(t, f, buf, 0, size, step, 0)
	checkLanded(t, dir, buf, 0, testenv.RandomBytes(46, 0, size), 0)
	if cs.cut.Load() == 0 || cs.stalls.Load() == 0 {
		t.Fatalf("%d GETs cut, %d stalled: the faults never happened", cs.cut.Load(), cs.stalls.Load())
	}
	if metricAt(t, d, "gpu_read_ahead_served_bytes_total", "") == 0 {
		t.Fatal("nothing was served from readahead")
	}
	f.Close()
	ringBack(t, d, "after the close")
}

// A caller killed while it reads in order, its readahead under way: its
// process's exit drops the readahead though the file stays open in another
// process, nothing is written outside its destination, and the file read
// on in order lands every byte.
func TestGPUAheadOfAKilledCallerIsDropped(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 48 << 20
	srv.PutRandomObject(t, "data", "obj", size, 47)
	object := testenv.RandomBytes(47, 0, size)
	mp, dir, d := aheadMount(t, srv, 16<<20, nil,
		mounttest.WrapStore(func(s objstore.Store) objstore.Store { return &slowBodies{Store: s, pause: 2 * time.Millisecond} }))
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const dst, fill = 4096, 0x77
	victim := hostBuffer(t, dir, "victim", size+2*dst, fill)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "S3GDSFS_TEST_AHEAD_CHILD=1", "S3GDSFS_TEST_BUF="+victim,
		fmt.Sprintf("S3GDSFS_TEST_LENGTH=%d", size), "S3GDSFS_TEST_STEP=1048576", fmt.Sprintf("S3GDSFS_TEST_DST=%d", dst))
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once it reads ahead.
	if !settle(30*time.Second, func() bool { return metricAt(t, d, "gpu_read_ahead_bytes_total", "") > 0 }) {
		cmd.Process.Kill()
		t.Fatal("the child never read ahead")
	}
	cmd.Process.Kill()
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("child ended %v before it was killed: the reads were too quick to test a kill", werr)
	}
	ringBack(t, d, "after the caller was killed, the file open elsewhere")

	b, _ := os.ReadFile(filepath.Join(dir, victim))
	if !bytes.Equal(b[:dst], bytes.Repeat([]byte{fill}, dst)) || !bytes.Equal(b[dst+size:], bytes.Repeat([]byte{fill}, dst)) {
		t.Fatal("the killed caller's reads wrote outside its destination")
	}
	for p := 0; p < size; p += 4096 {
		got := b[dst+p : dst+p+4096]
		if !bytes.Equal(got, object[p:p+4096]) && !bytes.Equal(got, bytes.Repeat([]byte{fill}, 4096)) {
			t.Fatalf("the killed caller's buffer holds bytes at +%d that are neither the fill nor the object's", p)
		}
	}
	buf := hostBuffer(t, dir, "after", size, 0)
	readFileInOrder(t, f, buf, 0, size, 1<<20, 0)
	checkLanded(t, dir, buf, 0, object, 0)
}

// A caller that read in order and was killed between reads, its file still
// open in another process: the callers' reaper drops what it read ahead,
// since no close will.
func TestGPUAheadOfAnExitedCallerIsDropped(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 48 << 20
	srv.PutRandomObject(t, "data", "obj", size, 48)
	mp, dir, d := aheadMount(t, srv, 16<<20, nil)
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "buf", size, 0)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "S3GDSFS_TEST_AHEAD_CHILD=1", "S3GDSFS_TEST_AHEAD_PAUSE=1", "S3GDSFS_TEST_BUF="+buf,
		"S3GDSFS_TEST_LENGTH=4194304", "S3GDSFS_TEST_STEP=1048576", "S3GDSFS_TEST_DST=0")
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("the child's reads: %q %v (exit %v)", line, err, cmd.Wait())
	}
	if got := metricAt(t, d, "gpu_read_ahead_slots", ""); got == 0 {
		t.Fatal("the child's reads in order read nothing ahead")
	}
	cmd.Process.Kill()
	cmd.Wait()
	ringBack(t, d, "after the caller was killed between reads, the file open elsewhere")
	got, _ := os.ReadFile(filepath.Join(dir, buf))
	if sha256.Sum256(got[:4<<20]) != sha256.Sum256(testenv.RandomBytes(48, 0, 4<<20)) {
		t.Fatal("the child's reads landed bytes that differ from the object's")
	}
}

// scripts/gpu/inorder_bench.py, against a host stand-in mount: its reads
// in order in two ioctl sizes land the object (it checks the sha256 it
// read through POSIX) and it reports each size's rate.
func TestGPUAheadInOrderBenchScript(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 24<<20 + 5
	sum := srv.PutRandomObject(t, "data", "big.bin", size, 49)
	mp, _, d := aheadMount(t, srv, 8<<20, func(c *daemon.Config) { c.GPU.StandinDir = "/dev/shm" })
	root, _ := filepath.Abs("..")
	cmd := exec.Command(py, filepath.Join(root, "scripts", "gpu", "inorder_bench.py"), "--device", "host",
		"--file", filepath.Join(mp, "big.bin"), "--steps", "1MiB,4MiB", "--rounds", "2")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "client", "python"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inorder_bench.py: %v\n%s", err, out)
	}
	var report struct {
		Bytes int64 `json:"bytes"`
		Steps map[string]struct {
			Ioctls int       `json:"ioctls"`
			GBps   []float64 `json:"gbps"`
			Errors []string  `json:"errors"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("inorder_bench.py printed %s: %v", out, err)
	}
	for step, ioctls := range map[string]int{"1048576": 25, "4194304": 7} {
		s, ok := report.Steps[step]
		if !ok || s.Ioctls != ioctls || len(s.GBps) != 2 || len(s.Errors) != 0 || s.GBps[0] <= 0 {
			t.Fatalf("step %s: %+v, want %d ioctls, two rounds, no errors\n%s", step, s, ioctls, out)
		}
	}
	if report.Bytes != size {
		t.Fatalf("the script read %d bytes, want %d", report.Bytes, size)
	}
	if metricAt(t, d, "gpu_read_ahead_served_bytes_total", "") == 0 {
		t.Fatal("the script's reads in order were served nothing from readahead")
	}
	// Its check can fail: told another sha256, it says so and exits 1.
	wrong := strings.Repeat("0", len(sum))
	cmd = exec.Command(py, filepath.Join(root, "scripts", "gpu", "inorder_bench.py"), "--device", "host",
		"--file", filepath.Join(mp, "big.bin"), "--steps", "4MiB", "--rounds", "1", "--sha256", wrong)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "client", "python"))
	out, err = cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "want "+wrong) {
		t.Fatalf("inorder_bench.py told a wrong sha256: %v\n%s", err, out)
	}
}
