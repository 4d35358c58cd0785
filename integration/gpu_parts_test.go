package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// rangeLog records the ranges of every GET sent.
type rangeLog struct {
	objstore.Store
	mu     sync.Mutex
	ranges [][2]int64
}

func (l *rangeLog) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	l.mu.Lock()
	l.ranges = append(l.ranges, [2]int64{off, n})
	l.mu.Unlock()
	return l.Store.GetRange(ctx, bucket, key, off, n, v)
}

func (l *rangeLog) take() [][2]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.ranges
	l.ranges = nil
	slices.SortFunc(r, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	return r
}

// A GPU read alone is cut into parallel ranges; one whose share of the
// target streams is a single GET asks for its whole range at once, which
// a server answers with the object itself (versitygw: sendfile).
func TestGPUReadPartsFollowTheLoad(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 40 << 20
	srv.PutRandomObject(t, "data", "obj", size, 21)
	want := sha256.Sum256(testenv.RandomBytes(21, 0, size))
	for _, tc := range []struct {
		name   string
		target int
		want   [][2]int64
	}{
		{"alone: --gpu-streams ranges, none under 8 MiB", daemon.Default().GPU.TargetStreams, [][2]int64{{0, 8 << 20}, {8 << 20, 8 << 20}, {16 << 20, 8 << 20}, {24 << 20, 8 << 20}, {32 << 20, 8 << 20}}},
		{"a share of one stream", 1, [][2]int64{{0, size}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &rangeLog{}
			mp, dir, _ := gpuMount(t, srv, "data", func(c *daemon.Config) {
				c.GPU.TargetStreams = tc.target
			}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { log.Store = s; return log }))
			f, err := os.Open(filepath.Join(mp, "obj"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := hostBuffer(t, dir, "buf", size, 0)
			log.take() // the open's own requests
			res, err := s3gds.Read(f, hostRequest(buf, 0, size, 0))
			if err != nil || res.Bytes != size {
				t.Fatalf("GPU read: %+v %v", res, err)
			}
			got, _ := os.ReadFile(filepath.Join(dir, buf))
			if sha256.Sum256(got) != want {
				t.Fatal("bytes in the buffer differ from the object")
			}
			if r := log.take(); !slices.Equal(r, tc.want) {
				t.Fatalf("GETs %v, want %v", r, tc.want)
			}
		})
	}
}

// slowBodies paces every GET body, so a GPU read takes long enough to be
// killed in the middle of its copies.
type slowBodies struct {
	objstore.Store
	pause time.Duration
}

func (s *slowBodies) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	body, err := s.Store.GetRange(ctx, bucket, key, off, n, v)
	if err != nil {
		return nil, err
	}
	return &pacedBody{ReadCloser: body, pause: s.pause}, nil
}

type pacedBody struct {
	io.ReadCloser
	pause time.Duration
}

func (p *pacedBody) Read(b []byte) (int, error) {
	time.Sleep(p.pause)
	return p.ReadCloser.Read(b[:min(len(b), 64<<10)])
}

// A caller killed in the middle of a GPU read, its GETs streaming into
// slots and its copies under way: the daemon gives every slot back (reads
// that need the whole ring then finish), writes nothing outside the
// caller's destination, and what it wrote there is the object's bytes.
// Both ways of reading a GET's body: on a connection of its own, paced by a
// proxy that sends bodies 32 KiB a millisecond, and through the HTTP client,
// paced by a store whose bodies give 64 KiB a millisecond.
func TestGPUReadOfAKilledCallerLeavesTheRingWhole(t *testing.T) {
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) { killedCallerLeavesTheRingWhole(t, raw) })
	}
}

func killedCallerLeavesTheRingWhole(t *testing.T, raw bool) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 24 << 20
	srv.PutRandomObject(t, "data", "obj", size, 31)
	object := testenv.RandomBytes(31, 0, size)
	var counted *faultstore.Faulty
	wrap := func(s objstore.Store) objstore.Store { return &slowBodies{Store: s, pause: time.Millisecond} }
	if raw {
		// No faults: it counts the raw GETs.
		wrap = func(s objstore.Store) objstore.Store {
			counted = faultstore.NewFaulty(s, faultstore.FaultConfig{})
			return counted
		}
	}
	mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
		if !raw {
			return
		}
		proxy := startProxy(t, srv.Endpoint, faultproxy.Config{SegmentSize: 32 << 10, SegmentGap: time.Millisecond})
		c.S3.Endpoint = proxy.URL
	}, mounttest.WrapStore(wrap))
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const dst, fill = 4096, 0x77
	victim := hostBuffer(t, dir, "victim", size+2*dst, fill)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "S3GDSFS_TEST_IOCTL_AS_CHILD=1", "S3GDSFS_TEST_BUF="+victim,
		fmt.Sprintf("S3GDSFS_TEST_LENGTH=%d", size), fmt.Sprintf("S3GDSFS_TEST_DST=%d", dst))
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once bytes have begun to land.
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, victim))
		if !bytes.Equal(b[dst:dst+4096], bytes.Repeat([]byte{fill}, 4096)) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the child's read never began to land")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Kill()
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("child ended %v before it was killed: the read was too quick to test a kill", werr)
	}

	// Every slot comes back: four reads at once, each wanting its streams'
	// share of the ring (gpuMount: 8 slots), all finish byte-exact.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := hostBuffer(t, dir, fmt.Sprintf("after%d", i), size, 0)
			res, err := s3gds.Read(f, hostRequest(name, 0, size, 0))
			if err != nil || res.Bytes != size {
				errs <- fmt.Errorf("read after the kill: %+v %v", res, err)
				return
			}
			if got, _ := os.ReadFile(filepath.Join(dir, name)); sha256.Sum256(got) != sha256.Sum256(object) {
				errs <- fmt.Errorf("read %d after the kill: bytes differ from the object", i)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("reads after the kill did not finish: slots of the killed read were not given back")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Every slot is back in the ring: none held, none copying.
	stager, err := d.GPU.Stager(0)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		held, copying := stager.Busy()
		if held == 0 && copying == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots still out of the ring after every read ended: %d held, %d copying", held, copying)
		}
	}

	// The victim's buffer, once the daemon is done with it: fill outside
	// the destination, and inside only the fill or the object's bytes.
	b, _ := os.ReadFile(filepath.Join(dir, victim))
	if !bytes.Equal(b[:dst], bytes.Repeat([]byte{fill}, dst)) || !bytes.Equal(b[dst+size:], bytes.Repeat([]byte{fill}, dst)) {
		t.Fatal("the killed read wrote outside its destination")
	}
	landed := 0
	for p := 0; p < size; p += 4096 {
		got := b[dst+p : dst+p+4096]
		switch {
		case bytes.Equal(got, object[p:p+4096]):
			landed++
		case bytes.Equal(got, bytes.Repeat([]byte{fill}, 4096)):
		default:
			t.Fatalf("the killed read left bytes at +%d that are neither the fill nor the object's", p)
		}
	}
	t.Logf("the killed read had landed %d of %d pages", landed, size/4096)
	if raw && counted.Counts()["raw_calls"] == 0 {
		t.Fatal("no GET body was read on a connection of its own")
	}
}
