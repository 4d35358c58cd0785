package rdmaread

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// memStore serves one object from memory, counting the bytes it sends; each
// body's reads wait on gate (when set) so that readers pile up behind a
// fetch under way, and fail, when cut is set, after cut bytes.
type memStore struct {
	objstore.Store
	data []byte
	etag string
	sent atomic.Int64
	gets atomic.Int64
	gate chan struct{}
	cut  atomic.Int64 // >0: the first body breaks after this many bytes
	// replaced: the object is another version now; every GET fails.
	replaced atomic.Bool
}

func (s *memStore) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	if s.replaced.Load() || v.ETag != s.etag || v.Size != int64(len(s.data)) {
		return nil, objstore.ErrChanged
	}
	s.gets.Add(1)
	return &memBody{s: s, ctx: ctx, rest: s.data[off : off+n], cut: s.cut.Swap(0)}, nil
}

type memBody struct {
	s    *memStore
	ctx  context.Context
	rest []byte
	cut  int64
	read int64
}

func (b *memBody) Read(p []byte) (int, error) {
	if b.s.gate != nil {
		select {
		case <-b.s.gate:
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		}
	}
	if len(b.rest) == 0 {
		return 0, io.EOF
	}
	if b.cut > 0 && b.read >= b.cut {
		return 0, fmt.Errorf("cut: %w", io.ErrUnexpectedEOF)
	}
	n := copy(p[:min(len(p), 64<<10)], b.rest)
	b.rest = b.rest[n:]
	b.read += int64(n)
	b.s.sent.Add(int64(n))
	return n, nil
}

func (b *memBody) Close() error { return nil }

type flightEnv struct {
	e       *Engine
	store   *memStore
	dir     string
	m       *metrics.Set
	backend cufile.Backend
}

func newFlightEnv(t *testing.T, size int, cfg Config) *flightEnv {
	t.Helper()
	dir := t.TempDir()
	b, err := hoststandin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	st := &memStore{data: data, etag: "v1"}
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	cfg.Staging = cufile.StagerConfig{SlotSize: 256 << 10, Slots: 64, Streams: 4}
	e := New(st, b, testConfig(cfg), m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { e.Close() })
	return &flightEnv{e: e, store: st, dir: dir, m: m, backend: b}
}

func (fe *flightEnv) buffer(t *testing.T, name string, size int) cufile.Handle {
	t.Helper()
	if err := os.WriteFile(filepath.Join(fe.dir, name), bytes.Repeat([]byte{0xEE}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	var h cufile.Handle
	copy(h[:], name)
	return h
}

func (fe *flightEnv) request(h cufile.Handle, off, n int64, dst uint64, etag string) Request {
	return Request{Bucket: "b", Key: "k", Version: objstore.Version{ETag: etag, Size: int64(len(fe.store.data))},
		Offset: off, Length: n, Handle: h, DstOffset: dst, Flags: abi.FlagHTTPOnly, Owner: os.Getpid()}
}

// check says whether the buffer holds the object's [off, off+n) at dst and
// nothing was written around it.
func (fe *flightEnv) check(name string, off, n int64, dst int) error {
	got, err := os.ReadFile(filepath.Join(fe.dir, name))
	if err != nil {
		return err
	}
	if sha256.Sum256(got[dst:dst+int(n)]) != sha256.Sum256(fe.store.data[off:off+n]) {
		return fmt.Errorf("%s: bytes differ from the object", name)
	}
	for i, c := range got {
		if (i < dst || i >= dst+int(n)) && c != 0xEE {
			return fmt.Errorf("%s: byte %d outside the destination written", name, i)
		}
	}
	return nil
}

// Eight readers of one object share one fetch: the server sends the object
// once, plus the part the first fetch had passed when the others came
// (fetched once more, for all of them), each destination gets every byte,
// and the results and counters say how much was shared.
func TestEightReadersShareOneFetch(t *testing.T) {
	const size, passed = 6<<20 + 12345, 20 * 64 << 10 // memBody reads 64 KiB at a time
	fe := newFlightEnv(t, size, Config{Share: true})
	fe.store.gate = make(chan struct{})
	var wg sync.WaitGroup
	results := make([]Result, 8)
	errs := make([]error, 8)
	for i := range 8 {
		h := fe.buffer(t, fmt.Sprintf("b%d", i), size+1000)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = fe.e.Read(context.Background(), fe.request(h, 0, size, uint64(i*100), "v1"))
		}()
		time.Sleep(5 * time.Millisecond)
		if i == 0 {
			// Let the first fetch get under way: the rest join late.
			for range passed / (64 << 10) {
				fe.store.gate <- struct{}{}
			}
		}
	}
	close(fe.store.gate)
	wg.Wait()
	var shared int64
	for i := range 8 {
		if errs[i] != nil {
			t.Fatalf("reader %d: %v", i, errs[i])
		}
		if err := fe.check(fmt.Sprintf("b%d", i), 0, size, i*100); err != nil {
			t.Error(err)
		}
		if results[i].Bytes != size || results[i].SharedBytes > size {
			t.Errorf("reader %d: %+v", i, results[i])
		}
		shared += results[i].SharedBytes
	}
	if sent := fe.store.sent.Load(); sent > size+passed {
		t.Errorf("the server sent %d bytes for 8 reads of %d, the first %d ahead", sent, size, passed)
	}
	if shared < 7*size-passed {
		t.Errorf("shared bytes %d, want at least %d", shared, 7*size-passed)
	}
	snap, _ := fe.m.Snapshot()
	if got := snap["gpu_shared_bytes_total"].(float64); got != float64(shared) {
		t.Errorf("gpu_shared_bytes_total %v, results say %d", got, shared)
	}
	if got := snap["gpu_fetched_bytes_total"].(float64); got != float64(fe.store.sent.Load()) {
		t.Errorf("gpu_fetched_bytes_total %v, the server sent %d", got, fe.store.sent.Load())
	}
	if n := fe.e.imports.OpenImports(); n != 8 {
		t.Errorf("%d imports open, want the 8 the readers hold", n)
	}
	fe.e.flights.mu.Lock()
	left := len(fe.e.flights.m)
	fe.e.flights.mu.Unlock()
	if left != 0 {
		t.Errorf("%d flights left in the table", left)
	}
}

// With sharing off, every reader fetches for itself.
func TestNoShareFetchesForEachReader(t *testing.T) {
	const size = 2 << 20
	fe := newFlightEnv(t, size, Config{})
	fe.store.gate = make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		h := fe.buffer(t, fmt.Sprintf("b%d", i), size)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := fe.e.Read(context.Background(), fe.request(h, 0, size, 0, "v1")); err != nil || res.SharedBytes != 0 {
				t.Errorf("reader %d: %+v %v", i, res, err)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(fe.store.gate)
	wg.Wait()
	if sent := fe.store.sent.Load(); sent != 3*size {
		t.Errorf("the server sent %d bytes, want %d", sent, 3*size)
	}
}

// The reader that started a fetch is cancelled mid-read: the others still
// get every byte, and the cancelled one returns at once.
func TestLeaderCancelledFollowersFinish(t *testing.T) {
	const size = 4 << 20
	fe := newFlightEnv(t, size, Config{Share: true})
	fe.store.gate = make(chan struct{})
	lctx, lcancel := context.WithCancel(context.Background())
	lh := fe.buffer(t, "leader", size)
	lerr := make(chan error, 1)
	go func() {
		_, err := fe.e.Read(lctx, fe.request(lh, 0, size, 0, "v1"))
		lerr <- err
	}()
	for range 10 {
		fe.store.gate <- struct{}{}
	}
	var wg sync.WaitGroup
	errs := make([]error, 7)
	for i := range 7 {
		h := fe.buffer(t, fmt.Sprintf("f%d", i), size)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = fe.e.Read(context.Background(), fe.request(h, 0, size, 0, "v1"))
		}()
	}
	time.Sleep(30 * time.Millisecond)
	lcancel()
	select {
	case err := <-lerr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("leader: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the cancelled leader did not return")
	}
	close(fe.store.gate)
	wg.Wait()
	for i := range 7 {
		if errs[i] != nil {
			t.Errorf("follower %d: %v", i, errs[i])
		} else if err := fe.check(fmt.Sprintf("f%d", i), 0, size, 0); err != nil {
			t.Error(err)
		}
	}
	if sent := fe.store.sent.Load(); sent > size*12/10 {
		t.Errorf("the server sent %d bytes for reads of %d", sent, size)
	}
}

// A reader holding another version never shares: it gets ESTALE from the
// store while the reader of the current version gets its bytes.
func TestOtherVersionNeverShares(t *testing.T) {
	const size = 2 << 20
	fe := newFlightEnv(t, size, Config{Share: true})
	fe.store.gate = make(chan struct{})
	a, b := fe.buffer(t, "a", size), fe.buffer(t, "b", size)
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { _, err := fe.e.Read(context.Background(), fe.request(a, 0, size, 0, "v1")); errA <- err }()
	time.Sleep(10 * time.Millisecond)
	go func() { _, err := fe.e.Read(context.Background(), fe.request(b, 0, size, 0, "v0")); errB <- err }()
	if err := <-errB; !errors.Is(err, objstore.ErrChanged) {
		t.Errorf("reader of the old version: %v, want ErrChanged", err)
	}
	close(fe.store.gate)
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	if err := fe.check("a", 0, size, 0); err != nil {
		t.Error(err)
	}
	if err := fe.check("b", 0, 0, 0); err != nil {
		t.Error(err)
	}
}

// Overlapping but different ranges share what overlaps and fetch the rest;
// a body cut mid-flight is asked for again and every reader gets its bytes.
func TestOverlappingRangesAndACutBody(t *testing.T) {
	const size = 5 << 20
	fe := newFlightEnv(t, size, Config{Share: true})
	fe.store.gate = make(chan struct{})
	fe.store.cut.Store(1 << 20)
	type rd struct{ off, n int64 }
	reads := []rd{{0, size}, {1 << 20, 2 << 20}, {3<<20 + 5, 2<<20 - 5}, {100, 1000}}
	var wg sync.WaitGroup
	errs := make([]error, len(reads))
	for i, r := range reads {
		h := fe.buffer(t, fmt.Sprintf("b%d", i), int(r.n)+10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = fe.e.Read(context.Background(), fe.request(h, r.off, r.n, 10, "v1"))
		}()
		time.Sleep(5 * time.Millisecond)
	}
	close(fe.store.gate)
	wg.Wait()
	for i, r := range reads {
		if errs[i] != nil {
			t.Errorf("read %d: %v", i, errs[i])
		} else if err := fe.check(fmt.Sprintf("b%d", i), r.off, r.n, 10); err != nil {
			t.Error(err)
		}
	}
	if sent := fe.store.sent.Load(); sent > 2*size {
		t.Errorf("the server sent %d bytes", sent)
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A read that joins a flight after its first slots have landed gets them
// from the daemon, not from the first reader's buffer: the first reader
// scribbles over its own buffer before the second joins and all through
// the read, and the second reader's bytes are the object's. The part the
// flight had passed is fetched again, the rest shared.
func TestLateJoinerNeverCopiesFromAnotherBuffer(t *testing.T) {
	const size = 4 << 20
	fe := newFlightEnv(t, size, Config{Share: true})
	fe.store.gate = make(chan struct{})
	lead, join := fe.buffer(t, "lead", size), fe.buffer(t, "join", size)
	leadErr := make(chan error, 1)
	go func() {
		_, err := fe.e.Read(context.Background(), fe.request(lead, 0, size, 0, "v1"))
		leadErr <- err
	}()
	// Let two slots' worth of the body through and wait until they have
	// landed in the first reader's buffer.
	for range 8 {
		fe.store.gate <- struct{}{}
	}
	leadPath := filepath.Join(fe.dir, "lead")
	const landed = 512 << 10
	waitFor(t, "the first slots to land", func() bool {
		got, err := os.ReadFile(leadPath)
		return err == nil && bytes.Equal(got[:landed], fe.store.data[:landed])
	})
	// The first reader writes its own bytes into its buffer, now and
	// until the second read is done.
	f, err := os.OpenFile(leadPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	scribble := bytes.Repeat([]byte{0x55}, size)
	if _, err := f.WriteAt(scribble, 0); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	scribbled := make(chan struct{})
	go func() {
		defer close(scribbled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.WriteAt(scribble, 0)
			time.Sleep(time.Millisecond)
		}
	}()
	var res Result
	joinErr := make(chan error, 1)
	go func() {
		var err error
		res, err = fe.e.Read(context.Background(), fe.request(join, 0, size, 0, "v1"))
		joinErr <- err
	}()
	// The second read has joined once the first flight has two
	// destinations.
	waitFor(t, "the second read to join", func() bool {
		fe.e.flights.mu.Lock()
		defer fe.e.flights.mu.Unlock()
		for _, fl := range fe.e.flights.m[flightKey{bucket: "b", key: "k", version: "etag:v1", size: size}] {
			fl.mu.Lock()
			n := len(fl.targets)
			fl.mu.Unlock()
			if n >= 2 {
				return true
			}
		}
		return false
	})
	close(fe.store.gate)
	err = <-joinErr
	close(stop)
	<-scribbled
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if err := <-leadErr; err != nil {
		t.Fatalf("first reader: %v", err)
	}
	if err := fe.check("join", 0, size, 0); err != nil {
		t.Fatal(err)
	}
	if res.SharedBytes == 0 || res.SharedBytes > size-landed {
		t.Errorf("second reader shared %d bytes, want some, at most the %d not yet landed when it joined", res.SharedBytes, size-landed)
	}
	if sent := fe.store.sent.Load(); sent > 2*size {
		t.Errorf("the server sent %d bytes for two reads of %d", sent, size)
	}
}

// A reader whose buffer is truncated under its mapping while it reads
// fails (EBADF) alone: a healthy reader of the same object, sharing its
// flights or, without sharing, its copy stream, gets every read right.
func TestFaultingReaderFailsAlone(t *testing.T) {
	for _, share := range []bool{true, false} {
		t.Run(fmt.Sprintf("share=%v", share), func(t *testing.T) {
			const size = 1 << 20
			fe := newFlightEnv(t, size, Config{Share: share})
			// One copy stream: without sharing the two readers' copies
			// still run on the same stream.
			fe.e.cfg.Staging.Streams = 1
			// Bodies flow a 64 KiB read at a time, so that the two
			// readers' fetches overlap and flights are joined.
			fe.store.gate = make(chan struct{})
			stop := make(chan struct{})
			var bg sync.WaitGroup
			defer func() { close(stop); bg.Wait() }()
			bg.Add(1)
			go func() {
				defer bg.Done()
				for {
					select {
					case fe.store.gate <- struct{}{}:
					case <-stop:
						return
					}
				}
			}()
			good, bad := fe.buffer(t, "good", size), fe.buffer(t, "bad", size)
			goodPath, badPath := filepath.Join(fe.dir, "good"), filepath.Join(fe.dir, "bad")
			// The faulting reader's process shrinks and regrows its
			// buffer's file in a loop.
			bg.Add(1)
			go func() {
				defer bg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					os.Truncate(badPath, 0)
					time.Sleep(100 * time.Microsecond)
					os.Truncate(badPath, size)
					time.Sleep(100 * time.Microsecond)
				}
			}()
			g, err := os.OpenFile(goodPath, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			fill := bytes.Repeat([]byte{0xEE}, size)
			var faults, rounds int
			var shared int64
			for rounds = 0; rounds < 2000 && (faults < 20 || rounds < 100); rounds++ {
				if _, err := g.WriteAt(fill, 0); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var goodErr, badErr error
				var goodRes, badRes Result
				wg.Add(2)
				go func() {
					defer wg.Done()
					goodRes, goodErr = fe.e.Read(context.Background(), fe.request(good, 0, size, 0, "v1"))
				}()
				go func() {
					defer wg.Done()
					badRes, badErr = fe.e.Read(context.Background(), fe.request(bad, 0, size, 0, "v1"))
				}()
				wg.Wait()
				shared += goodRes.SharedBytes + badRes.SharedBytes
				if goodErr != nil {
					t.Fatalf("round %d: the healthy reader failed: %v (the faulting one: %v)", rounds, goodErr, badErr)
				}
				if err := fe.check("good", 0, size, 0); err != nil {
					t.Fatalf("round %d: %v", rounds, err)
				}
				if badErr != nil {
					// EBADF: a copy into it failed; EINVAL: it was empty
					// when imported (the host stand-in refuses empty files).
					if code, _ := errno.Of(IoctlError(badErr)); code != syscall.EBADF && code != syscall.EINVAL {
						t.Fatalf("round %d: the faulting reader: %v, want EBADF or EINVAL", rounds, badErr)
					}
					faults++
				}
			}
			t.Logf("%d rounds, the faulting reader failed in %d; %d bytes shared", rounds, faults, shared)
			if faults == 0 {
				t.Fatal("the truncated buffer never failed a read")
			}
			if share && shared == 0 {
				t.Fatal("the two readers never shared a flight")
			}
		})
	}
}
