package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// slowStart holds each GET back a little before its body flows, so that
// readers issued together find the first one's fetch under way.
type slowStart struct{ objstore.Store }

func (s slowStart) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	select {
	case <-time.After(150 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.GetRange(ctx, bucket, key, off, n, v)
}

// Eight ranks read one object into eight buffers through a real mount:
// the server sends the object about once, every buffer gets every byte.
func TestGPUEightReadersShareOneFetch(t *testing.T) {
	for _, share := range []bool{true, false} {
		t.Run(fmt.Sprintf("share=%v", share), func(t *testing.T) {
			srv := testenv.Start(t)
			srv.CreateBucket(t, "data")
			const size = 12<<20 + 999
			srv.PutRandomObject(t, "data", "obj", size, 31)
			want := sha256.Sum256(testenv.RandomBytes(31, 0, size))
			mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
				c.GPU.Share = share
			}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { return slowStart{s} }))
			var files [8]*os.File
			var bufs [8]string
			for i := range 8 {
				f, err := os.Open(filepath.Join(mp, "obj"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				files[i] = f
				bufs[i] = hostBuffer(t, dir, fmt.Sprintf("b%d", i), size, 0xEE)
			}
			before := metricAt(t, d, "s3_received_bytes_total", "")
			var wg sync.WaitGroup
			results := make([]s3gds.Result, 8)
			errs := make([]error, 8)
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], errs[i] = s3gds.Read(files[i], hostRequest(bufs[i], 0, size, 0))
				}()
			}
			wg.Wait()
			received := metricAt(t, d, "s3_received_bytes_total", "") - before
			checkReaders(t, dir, bufs[:], results, errs, size, want)
			shared := metricAt(t, d, "gpu_shared_bytes_total", "")
			fetched := metricAt(t, d, "gpu_fetched_bytes_total", "")
			t.Logf("received %v bytes from S3 (fetched %v) for 8 reads of %d; %v shared", received, fetched, size, shared)
			if share {
				if received > 1.2*size {
					t.Errorf("the server sent %v bytes for 8 reads of %d", received, size)
				}
				if shared < 6*size {
					t.Errorf("gpu_shared_bytes_total %v, want at least %d", shared, 6*size)
				}
				st, err := s3gds.Stats(filepath.Join(mp, "obj"))
				if err != nil {
					t.Fatal(err)
				}
				counters, _ := st["counters"].(map[string]any)
				if v, _ := counters["gpu_shared_bytes"].(float64); v < 6*size {
					t.Errorf("the file's stats say %v shared bytes: %v", v, counters)
				}
			} else if received < 8*size || shared != 0 {
				t.Errorf("with sharing off: received %v, shared %v", received, shared)
			}
		})
	}
}

// An object replaced between two readers' opens: each holds its own
// version, so they never share, and each gets its own version's bytes or
// ESTALE, never the other's.
func TestGPUReadersOfTwoVersionsNeverShare(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 6 << 20
	srv.PutRandomObject(t, "data", "obj", size, 41)
	mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.Core.MetaTTL = 200 * time.Millisecond
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { return slowStart{s} }))
	old, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	srv.PutRandomObject(t, "data", "obj", size, 42)
	time.Sleep(300 * time.Millisecond)
	fresh, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	a, b := hostBuffer(t, dir, "a", size, 0xEE), hostBuffer(t, dir, "b", size, 0xEE)
	var wg sync.WaitGroup
	var errOld, errNew error
	var resNew s3gds.Result
	wg.Add(2)
	go func() { defer wg.Done(); _, errOld = s3gds.Read(old, hostRequest(a, 0, size, 0)) }()
	go func() { defer wg.Done(); resNew, errNew = s3gds.Read(fresh, hostRequest(b, 0, size, 0)) }()
	wg.Wait()
	if errNew != nil || resNew.Bytes != size {
		t.Fatalf("reader of the new version: %+v %v", resNew, errNew)
	}
	gotB, _ := os.ReadFile(filepath.Join(dir, b))
	if sha256.Sum256(gotB) != sha256.Sum256(testenv.RandomBytes(42, 0, size)) {
		t.Error("the new version's reader got other bytes")
	}
	gotA, _ := os.ReadFile(filepath.Join(dir, a))
	if errOld == nil {
		if sha256.Sum256(gotA) != sha256.Sum256(testenv.RandomBytes(41, 0, size)) {
			t.Error("the old version's reader succeeded with other bytes")
		}
	} else if !errors.Is(errOld, unix.ESTALE) {
		t.Errorf("the old version's reader: %v, want success or ESTALE", errOld)
	}
	for p := 0; p < size; p += 1 << 20 {
		if sha256.Sum256(gotA[p:p+1<<20]) == sha256.Sum256(testenv.RandomBytes(42, int64(p), 1<<20)) {
			t.Errorf("MiB %d of the old version's buffer holds the new version", p>>20)
		}
	}
	if shared := metricAt(t, d, "gpu_shared_bytes_total", ""); shared != 0 {
		t.Errorf("readers of two versions shared %v bytes", shared)
	}
}

// slowBody serves GET bodies at about 32 MB/s, and closes started once the
// first body has begun to flow: a read takes long enough to be joined and
// killed in.
type slowBody struct {
	objstore.Store
	started chan struct{}
	once    *sync.Once
}

func (s slowBody) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	body, err := s.Store.GetRange(ctx, bucket, key, off, n, v)
	if err != nil {
		return nil, err
	}
	s.once.Do(func() { close(s.started) })
	return slowReader{body}, nil
}

type slowReader struct{ io.ReadCloser }

func (r slowReader) Read(p []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	return r.ReadCloser.Read(p[:min(len(p), 64<<10)])
}

// The first reader of a shared fetch is a process killed mid-read: the
// seven that joined it finish with every byte right, the fetch is not
// started again for them (only the part it had passed when they came is
// fetched once more), and the killed caller's buffer gets nothing after
// its death but what had already been enqueued (none of it outside the
// range it asked for).
func TestGPUSharedFetchOutlivesAKilledFirstReader(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 24<<20 + 4321
	srv.PutRandomObject(t, "data", "obj", size, 47)
	want := sha256.Sum256(testenv.RandomBytes(47, 0, size))
	started := make(chan struct{})
	mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.GPU.Share = true
		c.GPU.TargetStreams = 1 // one fetch of the whole object
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { return slowBody{s, started, &sync.Once{}} }))
	leadFile, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer leadFile.Close()
	lead := hostBuffer(t, dir, "lead", size+4096, 0xEE)
	// The seven that join, ready before the fetch starts so that they
	// come together.
	var files [7]*os.File
	bufs := make([]string, 7)
	for i := range 7 {
		f, err := os.Open(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
		bufs[i] = hostBuffer(t, dir, fmt.Sprintf("f%d", i), size, 0xEE)
	}
	before := metricAt(t, d, "s3_received_bytes_total", "")

	// The first reader, in a process of its own, starts the fetch.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "S3GDSFS_TEST_IOCTL_AS_CHILD=1", "S3GDSFS_TEST_BUF="+lead,
		fmt.Sprintf("S3GDSFS_TEST_LENGTH=%d", size))
	child.ExtraFiles = []*os.File{leadFile}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		child.Process.Kill()
		t.Fatal("the first reader's GET never began")
	}

	// Seven more join it.
	var wg sync.WaitGroup
	results := make([]s3gds.Result, 7)
	errs := make([]error, 7)
	for i := range 7 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s3gds.Read(files[i], hostRequest(bufs[i], 0, size, 0))
		}()
	}
	// Then the first reader dies while the fetch runs.
	time.Sleep(100 * time.Millisecond)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	wg.Wait()

	checkReaders(t, dir, bufs, results, errs, size, want)
	received := metricAt(t, d, "s3_received_bytes_total", "") - before
	shared := metricAt(t, d, "gpu_shared_bytes_total", "")
	t.Logf("received %v bytes from S3 for 8 reads of %d, the first killed; %v shared", received, size, shared)
	if received > 1.2*size {
		t.Errorf("the server sent %v bytes for reads of a %d-byte object", received, size)
	}
	// What the followers did not share they fetched again: the part the
	// fetch had passed when they came, beyond the one fetch of the object.
	if shared < 7*size-(received-size) {
		t.Errorf("gpu_shared_bytes_total %v, want the seven followers' %d but for the %v fetched again", shared, 7*size, received-size)
	}
	// The killed caller's buffer: a prefix of the object's bytes, then the
	// fill; nothing past the range it asked for.
	got, _ := os.ReadFile(filepath.Join(dir, lead))
	obj := testenv.RandomBytes(47, 0, size)
	n := 0
	for n < size && got[n] == obj[n] {
		n++
	}
	for i := n; i < len(got); i++ {
		if got[i] != 0xEE && (i >= size || got[i] != obj[i]) {
			t.Fatalf("the killed reader's buffer holds a wrong byte at %d (%d bytes landed whole)", i, n)
		}
	}
}

// checkReaders fails the test unless every reader read size bytes without
// error and its stand-in buffer in dir holds the object (sha256 want).
func checkReaders(t *testing.T, dir string, bufs []string, results []s3gds.Result, errs []error, size uint64, want [32]byte) {
	t.Helper()
	for i := range bufs {
		if errs[i] != nil || results[i].Bytes != size {
			t.Fatalf("reader %d: %+v %v", i, results[i], errs[i])
		}
		got, _ := os.ReadFile(filepath.Join(dir, bufs[i]))
		if sha256.Sum256(got) != want {
			t.Errorf("reader %d: the buffer differs from the object", i)
		}
	}
}

// A reader that joins a shared fetch after its first slots have landed
// gets them from the daemon, never from the first reader's buffer: the
// first reader writes its own bytes over its buffer before the second
// joins and all through the second read, and the second reader's bytes
// are the object's.
func TestGPUJoinerGetsNoBytesFromAnotherBuffer(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 16<<20 + 777
	srv.PutRandomObject(t, "data", "obj", size, 53)
	obj := testenv.RandomBytes(53, 0, size)
	started := make(chan struct{})
	mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.GPU.Share = true
		c.GPU.TargetStreams = 1 // one fetch of the whole object
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { return slowBody{s, started, &sync.Once{}} }))
	var files [2]*os.File
	for i := range files {
		f, err := os.Open(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	lead := hostBuffer(t, dir, "lead", size, 0xEE)
	join := hostBuffer(t, dir, "join", size, 0xEE)
	leadErr := make(chan error, 1)
	go func() {
		_, err := s3gds.Read(files[0], hostRequest(lead, 0, size, 0))
		leadErr <- err
	}()
	// Once the first slot (1 MiB) has landed in the first reader's buffer,
	// that reader scribbles over it, and goes on until the second is done.
	lf, err := os.OpenFile(filepath.Join(dir, lead), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	head := make([]byte, 1<<20)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if _, err := lf.ReadAt(head, 0); err != nil {
			t.Fatal(err)
		}
		if string(head) == string(obj[:len(head)]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first reader's bytes never began to land")
		}
	}
	scribble := bytes.Repeat([]byte{0x55}, size)
	if _, err := lf.WriteAt(scribble, 0); err != nil {
		t.Fatal(err)
	}
	stop, scribbled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(scribbled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			lf.WriteAt(scribble, 0)
			time.Sleep(time.Millisecond)
		}
	}()
	res, err := s3gds.Read(files[1], hostRequest(join, 0, size, 0))
	close(stop)
	<-scribbled
	if err != nil || res.Bytes != size {
		t.Fatalf("the second reader: %+v %v", res, err)
	}
	if err := <-leadErr; err != nil {
		t.Fatalf("the first reader: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, join))
	if sha256.Sum256(got) != sha256.Sum256(obj) {
		n := 0
		for n < size && got[n] == obj[n] {
			n++
		}
		t.Fatalf("the second reader's buffer differs from the object from byte %d (0x%02x)", n, got[n])
	}
	shared := metricAt(t, d, "gpu_shared_bytes_total", "")
	t.Logf("the second reader shared %v of %d bytes", shared, size)
	if shared <= 0 || shared > size-(1<<20) {
		t.Errorf("gpu_shared_bytes_total %v: want some, at most what had not landed when it joined", shared)
	}
}

// A caller whose buffer is truncated under it in a loop (another process's
// doing to its own buffer) has its reads fail with EBADF, alone: every read
// of a healthy caller beside it, in the same shared fetches or on the same
// copy stream, succeeds byte-exact.
func TestGPUFaultingCallerFailsAlone(t *testing.T) {
	for _, share := range []bool{true, false} {
		t.Run(fmt.Sprintf("share=%v", share), func(t *testing.T) {
			srv := testenv.Start(t)
			srv.CreateBucket(t, "data")
			const size = 2<<20 + 99
			srv.PutRandomObject(t, "data", "obj", size, 59)
			want := sha256.Sum256(testenv.RandomBytes(59, 0, size))
			mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
				c.GPU.Share = share
				c.GPU.Staging.Streams = 1 // every copy on one stream
			}, mounttest.WrapStore(func(s objstore.Store) objstore.Store {
				return slowBody{s, make(chan struct{}), &sync.Once{}}
			}))
			var files [2]*os.File
			for i := range files {
				f, err := os.Open(filepath.Join(mp, "obj"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				files[i] = f
			}
			good := hostBuffer(t, dir, "good", size, 0xEE)
			bad := hostBuffer(t, dir, "bad", size, 0xEE)
			badPath := filepath.Join(dir, bad)
			stop := make(chan struct{})
			var bg sync.WaitGroup
			var faults, badOK int
			var badOther error
			bg.Add(2)
			go func() { // the faulting caller shrinks and regrows its buffer
				defer bg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					os.Truncate(badPath, 0)
					time.Sleep(200 * time.Microsecond)
					os.Truncate(badPath, size)
					time.Sleep(200 * time.Microsecond)
				}
			}()
			go func() { // and reads into it
				defer bg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := s3gds.Read(files[1], hostRequest(bad, 0, size, 0))
					switch {
					case err == nil:
						badOK++
					// EBADF: a copy into it failed; EINVAL: it was empty
					// when imported (the host stand-in refuses empty files).
					case errors.Is(err, unix.EBADF), errors.Is(err, unix.EINVAL):
						faults++
					case badOther == nil:
						badOther = err
					}
				}
			}()
			gf, err := os.OpenFile(filepath.Join(dir, good), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer gf.Close()
			fill := bytes.Repeat([]byte{0xEE}, size)
			const reads = 40
			var failed []string
			for i := range reads {
				if _, err := gf.WriteAt(fill, 0); err != nil {
					t.Fatal(err)
				}
				res, err := s3gds.Read(files[0], hostRequest(good, 0, size, 0))
				if err != nil || res.Bytes != size {
					failed = append(failed, fmt.Sprintf("read %d: %+v %v", i, res, err))
					continue
				}
				got, _ := os.ReadFile(filepath.Join(dir, good))
				if sha256.Sum256(got) != want {
					failed = append(failed, fmt.Sprintf("read %d: bytes differ from the object", i))
				}
			}
			close(stop)
			bg.Wait()
			shared := metricAt(t, d, "gpu_shared_bytes_total", "")
			t.Logf("healthy: %d of %d reads failed; faulting: %d EBADF or EINVAL, %d whole; %v bytes shared",
				len(failed), reads, faults, badOK, shared)
			for _, f := range failed {
				t.Error(f)
			}
			if badOther != nil {
				t.Errorf("the faulting caller's read failed with %v, want EBADF or EINVAL", badOther)
			}
			if faults == 0 {
				t.Error("the truncated buffer never failed a read")
			}
			if share && shared == 0 {
				t.Error("the two callers never shared a fetch")
			}
		})
	}
}
