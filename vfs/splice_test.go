package vfs

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// rawMemStore serves GetRaw from memStore's objects over a real loopback
// TCP connection, as a server's socket would.
type rawMemStore struct {
	*memStore
	t *testing.T
	// segment, when set, sends the first segmentFor bytes of bodies (all,
	// if 0) in writes of that many bytes with a pause after each: small
	// packets, not pages; the rest in one write.
	segment, segmentFor int
	// cutAt, when set, has the server close the connection after that
	// many bytes of a body: a GET that fails while it is read.
	cutAt int
	// headDelay, when set, holds each reply back that long: a GET slow
	// to open.
	headDelay time.Duration
}

// rawConns holds, for each test, the client end of its latest raw GET.
var rawConns sync.Map // *testing.T -> *net.TCPConn

// waitSocketHolds waits until the socket of t's latest raw GET holds bytes
// not yet read, for a test that knows more are to come: how soon the
// kernel and the server's goroutine refill the socket after a reply took
// from it depends on the machine's load.
func waitSocketHolds(t *testing.T) {
	t.Helper()
	c, ok := rawConns.Load(t)
	if !ok {
		t.Fatal("no raw GET")
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n := 0
		rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("after 10s, the socket holds nothing of what the server sent")
		}
	}
}

func (r rawMemStore) GetRaw(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (*objstore.RawBody, error) {
	r.mu.Lock()
	data := r.objects[bucket+"/"+key][off : off+n]
	r.mu.Unlock()
	sent := data
	if r.cutAt > 0 {
		sent = data[:min(r.cutAt, len(data))]
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		time.Sleep(r.headDelay)
		small := 0
		if r.segment > 0 {
			small = len(sent)
			if r.segmentFor > 0 {
				small = min(r.segmentFor, len(sent))
			}
		}
		for rest := sent[:small]; len(rest) > 0; rest = rest[min(r.segment, len(rest)):] {
			if _, err := c.Write(rest[:min(r.segment, len(rest))]); err != nil {
				return
			}
			time.Sleep(20 * time.Microsecond)
		}
		c.Write(sent[small:])
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	r.t.Cleanup(func() { c.Close() })
	rawConns.Store(r.t, c.(*net.TCPConn))
	r.t.Cleanup(func() { rawConns.CompareAndDelete(r.t, c) })
	// Some bytes arrive with the headers, as from an HTTP reply.
	head := make([]byte, 1000)
	if _, err := c.Read(head[:1]); err != nil {
		return nil, err
	}
	return objstore.NewRawBody(c.(*net.TCPConn), head[:1], n, 0)
}

// takeFromPipe reads k bytes out of a spliced read's pipe, as go-fuse
// splices them on.
func takeFromPipe(t *testing.T, fd, k int) []byte {
	t.Helper()
	out := make([]byte, k)
	for got := 0; got < k; {
		n, err := unix.Read(fd, out[got:])
		if err != nil || n == 0 {
			t.Fatalf("pipe read after %d of %d bytes: %v", got, k, err)
		}
		got += n
	}
	return out
}

// spliceWhole serves one read of h by splicing and takes the whole reply,
// out of the pipe as go-fuse does, or copied.
func spliceWhole(t *testing.T, h *Handle, off int64, n int) (b []byte, copied bool) {
	t.Helper()
	r, ok := spliceRead(h, off, n)
	if !ok {
		t.Fatalf("read of %d bytes at %d not spliced", n, off)
	}
	if r.Data != nil {
		return r.Data, true
	}
	b = takeFromPipe(t, r.Pipe.FD, r.Pipe.N)
	if taken := r.Pipe.Done(); taken != r.Pipe.N {
		t.Fatalf("done says %d bytes taken, %d were", taken, r.Pipe.N)
	}
	return b, false
}

func openSpliced(t *testing.T, f *FS, key string) *Handle {
	t.Helper()
	h := openFile(t, f, key)
	t.Cleanup(func() { h.Close() })
	if h.spliced == nil {
		t.Fatalf("%s opened without its spliced reader", key)
	}
	return h
}

// spliceRead asks h's spliced reader alone for a read; ok is false when it
// falls back to the next reader.
func spliceRead(h *Handle, off int64, n int) (r Reply, ok bool) {
	r, err := h.spliced.read(context.Background(), off, n, false)
	return r, err == nil
}

// Every reply is whole: the read's size, less only at the end of the
// object. A reply go-fuse took only in part (its request was interrupted)
// ends the feed: the reader asks again for what it did not get, and the
// ordinary read that serves it is right. So is one elsewhere.
func TestSpliceReadRepliesWholeAndHandsOverWhenAReplyIsNotTaken(t *testing.T) {
	ms := newMemStore()
	const size = 5<<20 + 77
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	ms.put("b", "obj", data, "e1")
	f := newTestFS(t, rawMemStore{memStore: ms, t: t}, Config{Splice: true, DirectIO: DirectIOAlways})

	h := openSpliced(t, f, "obj")
	var got []byte
	for off := int64(0); off < size; {
		b, copied := spliceWhole(t, h, off, 1<<20)
		if copied || len(b) != int(min(1<<20, size-off)) {
			t.Fatalf("reply at %d: %d bytes, copied %v: want a whole one, spliced", off, len(b), copied)
		}
		got = append(got, b...)
		off += int64(len(b))
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("spliced %d bytes, not the object's", len(got))
	}
	checkSplicedWhole(t, f, size)

	// A second handle: go-fuse takes a third of its second reply.
	h2 := openFile(t, f, "obj")
	spliceWhole(t, h2, 0, 1<<20)
	r, ok := spliceRead(h2, 1<<20, 1<<20)
	if !ok {
		t.Fatal("second read not spliced")
	}
	takeFromPipe(t, r.Pipe.FD, r.Pipe.N/3)
	if taken := r.Pipe.Done(); taken != r.Pipe.N/3 {
		t.Fatalf("done says %d taken, want %d", taken, r.Pipe.N/3)
	}
	at := int64(1<<20 + r.Pipe.N/3)
	if _, ok := spliceRead(h2, at, 1<<20); ok {
		t.Fatal("a read after a reply taken in part was spliced")
	}
	buf := make([]byte, 1<<20)
	if _, err := h2.ReadAt(context.Background(), buf, at); err != nil || !bytes.Equal(buf, data[at:at+1<<20]) {
		t.Fatalf("ordinary read after the feed ended: %v or wrong bytes", err)
	}

	h2.Close() // an ordinary reader of the object: no splice beside it

	// A third reads at an offset other than where its GET is.
	h3 := openSpliced(t, f, "obj")
	spliceWhole(t, h3, 0, 1<<20)
	if _, ok := spliceRead(h3, 3<<20, 1<<20); ok {
		t.Fatal("a read elsewhere was spliced")
	}
	if _, err := h3.ReadAt(context.Background(), buf, 3<<20); err != nil || !bytes.Equal(buf, data[3<<20:4<<20]) {
		t.Fatalf("ordinary read after the feed ended: %v or wrong bytes", err)
	}
}

// A socket that brings its bytes in small packets fills the reply's pipe
// with buffers before a reply's worth: those replies are copied, the rest
// of each straight from the socket, and every byte is right; the GET goes
// on to the end, and once the packets are pages again (tried after a run
// of copied replies) replies are spliced again.
func TestSpliceReadCopiesRepliesOfSmallBuffers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		segmentFor int
		size       int
		ahead      bool
	}{{"small throughout", 0, 1<<20 + 333, false}, {"small then pages", 256 << 10, 4<<20 + 333, false},
		{"small then pages, filling ahead", 256 << 10, 4<<20 + 333, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := newMemStore()
			data := randomBytes(tc.size, 27)
			ms.put("b", "obj", data, "e1")
			f := newTestFS(t, rawMemStore{memStore: ms, t: t, segment: 700, segmentFor: tc.segmentFor},
				Config{Splice: true, DirectIO: DirectIOAlways, SpliceAhead: tc.ahead})
			h := openSpliced(t, f, "obj")
			var got []byte
			copiedBytes := 0
			for off := int64(0); off < int64(tc.size); {
				b, copied := spliceWhole(t, h, off, 64<<10)
				if copied {
					copiedBytes += len(b)
				}
				got = append(got, b...)
				off += int64(len(b))
			}
			if !bytes.Equal(got, data) {
				t.Fatal("bytes differ from the object")
			}
			snap, err := f.m.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if copiedBytes == 0 || snap["splice_small_buffer_bytes_total"] != float64(copiedBytes) {
				t.Errorf("%d bytes copied, counted %v: want some, each counted", copiedBytes, snap["splice_small_buffer_bytes_total"])
			}
			spliced := snap["splice_bytes_total"].(float64)
			if spliced+float64(copiedBytes) != float64(tc.size) || (tc.segmentFor > 0 && spliced == 0) {
				t.Errorf("%v bytes spliced, %d copied, of %d: want splicing again once the packets are pages", spliced, copiedBytes, tc.size)
			}
			if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[done:1]" {
				t.Errorf("splice ends %s, want one done", ends)
			}
		})
	}
}

// With SpliceAhead the next reply's bytes leave the socket before the next
// read comes: spliced into a second pipe while a reply is written (whole,
// when the pipe held just that reply), or, after a reply that left bytes
// behind, what the socket holds into the one pipe (without SpliceAhead,
// nothing). Reads of other sizes than the last take what they ask for, no
// more, and every byte is the object's.
func TestSpliceReadFillsTheNextReplyAhead(t *testing.T) {
	for _, ahead := range []bool{true, false} {
		t.Run(fmt.Sprintf("SpliceAhead=%v", ahead), func(t *testing.T) { testSpliceAhead(t, ahead) })
	}
}

func testSpliceAhead(t *testing.T, ahead bool) {
	const size = 6<<20 + 4321
	data, f, h := splicedObject(t, size, 41, Config{Splice: true, DirectIO: DirectIOAlways, SpliceAhead: ahead})

	sizes := []int{1 << 20, 1 << 20, 256 << 10, 64 << 10, 1 << 20, 300 << 10, 1 << 20}
	var got []byte
	filledAhead, wholeAhead := 0, 0
	for i, off := 0, int64(0); off < size; i++ {
		n := sizes[i%len(sizes)]
		ready := readyInPipe(t, h)
		r, ok := spliceRead(h, off, n)
		if !ok || r.Data != nil {
			t.Fatalf("read %d of %d bytes at %d: spliced %v, copied %v; want it spliced", i, n, off, ok, r.Data != nil)
		}
		want := int(min(int64(n), size-off))
		if r.Pipe.N != want {
			t.Fatalf("read %d at %d: reply of %d bytes, want %d", i, off, r.Pipe.N, want)
		}
		got = append(got, takeFromPipe(t, r.Pipe.FD, r.Pipe.N)...)
		time.Sleep(20 * time.Millisecond) // the socket catches up while the reader wakes
		if taken := r.Pipe.Done(); taken != r.Pipe.N {
			t.Fatalf("read %d: done says %d taken, want %d", i, taken, r.Pipe.N)
		}
		off += int64(r.Pipe.N)
		if off < size {
			next := readyInPipe(t, h)
			// At most what the largest read before asked for: the fill
			// ahead is of the last reply's size, and a smaller read
			// leaves the rest of it.
			if next > 1<<20 || int64(next) > size-off {
				t.Fatalf("after read %d: %d bytes in the pipe at %d, more than a read asked for or the object has left", i, next, off)
			}
			if next > 0 {
				filledAhead++
			}
			// A pipe that held just this reply had the next one's
			// bytes spliced beside it, all of them.
			if ahead && ready == want && next != int(min(int64(want), size-off)) {
				t.Fatalf("after read %d of %d bytes, the pipe's whole: %d of the next in the pipe, want %d", i, want, next, min(int64(want), size-off))
			}
			if ahead && ready == want {
				if h.spliced.feed.Load().pr == r.Pipe.FD {
					t.Fatalf("after read %d the feed still reads the pipe the reply left: nothing was spliced beside it", i)
				}
				wholeAhead++
			}
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("spliced bytes differ from the object")
	}
	if ahead && (filledAhead == 0 || wholeAhead == 0) {
		t.Errorf("%d replies' bytes were in the pipe before their reads, %d whole beside a reply: want some of each", filledAhead, wholeAhead)
	}
	if !ahead && filledAhead != 0 {
		t.Errorf("%d replies' bytes were in the pipe before their reads without SpliceAhead", filledAhead)
	}
	checkSplicedWhole(t, f, size)
}

// Where a second pipe cannot be had, SpliceAhead fills the one pipe after
// each reply with what the socket holds of the next, and every byte is
// the object's.
func TestSpliceReadFillsAheadInOnePipeWithoutASpare(t *testing.T) {
	const size = 5<<20 + 99
	data, f, h := splicedObject(t, size, 45, Config{Splice: true, DirectIO: DirectIOAlways, SpliceAhead: true})
	spliceWhole(t, h, 0, 1<<20)          // starts the feed
	h.spliced.feed.Load().noSpare = true // as when F_SETPIPE_SZ is refused
	got := append([]byte(nil), data[:1<<20]...)
	filledAhead := 0
	for off := int64(1 << 20); off < size; {
		r, ok := spliceRead(h, off, 1<<20)
		if !ok || r.Data != nil {
			t.Fatalf("read at %d not spliced from the pipe", off)
		}
		fd := r.Pipe.FD
		got = append(got, takeFromPipe(t, r.Pipe.FD, r.Pipe.N)...)
		if off+int64(r.Pipe.N) < size { // the rest is on its way: the fill ahead takes what has come
			waitSocketHolds(t)
		}
		r.Pipe.Done()
		off += int64(r.Pipe.N)
		if off == size {
			break
		}
		if h.spliced.feed.Load().pr != fd {
			t.Fatalf("after the reply before %d the feed's pipe changed without a spare", off)
		}
		if readyInPipe(t, h) > 0 {
			filledAhead++
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("spliced bytes differ from the object")
	}
	if filledAhead == 0 {
		t.Error("nothing was filled ahead into the one pipe")
	}
	checkSplicedWhole(t, f, size)
}

// A GET that fails while the next reply is spliced beside this one (the
// server closed the connection early) leaves this reply whole and right;
// the next read is served by ordinary reads, right, and the feed ends
// counted as an error.
func TestSpliceReadBesideAReplyMeetsAFailedGET(t *testing.T) {
	const size = 4<<20 + 11
	ms := newMemStore()
	data := randomBytes(size, 47)
	ms.put("b", "obj", data, "e1")
	const cut = 1<<20 + 300<<10 // the server sends this much, then closes
	f := newTestFS(t, rawMemStore{memStore: ms, t: t, cutAt: cut}, Config{Splice: true, DirectIO: DirectIOAlways, SpliceAhead: true})
	h := openSpliced(t, f, "obj")
	// The second reply's bytes fail to come beside the first.
	b, _ := spliceWhole(t, h, 0, 1<<20)
	if !bytes.Equal(b, data[:1<<20]) {
		t.Fatal("first reply's bytes differ")
	}
	if _, ok := spliceRead(h, 1<<20, 1<<20); ok {
		t.Fatal("a read after the GET failed was spliced")
	}
	snap := readsOnAfterTheFeed(t, f, h, data, 1<<20, spliceError)
	if b := snap["splice_bytes_total"]; b != float64(1<<20) {
		t.Errorf("spliced bytes %v, want the first reply's %d", b, 1<<20)
	}
}

// readyInPipe is how many bytes of the next reply wait in the pipe of h's
// feed (0 without one), checked against the pipe itself.
func readyInPipe(t *testing.T, h *Handle) int {
	t.Helper()
	feed := h.spliced.feed.Load()
	if feed == nil {
		return 0
	}
	if ok, _ := feed.take(context.Background(), time.Minute); !ok {
		t.Fatal("the feed's turn did not come")
	}
	defer func() { <-feed.turn }()
	n, err := unix.IoctlGetInt(feed.pr, unix.TIOCINQ)
	if err != nil || n != feed.inPipe {
		t.Fatalf("pipe holds %d bytes (%v), the feed says %d", n, err, feed.inPipe)
	}
	return n
}

// A read that comes after bytes were filled ahead but not where they start
// (the reader seeked) ends the feed, and the ordinary read that serves it,
// and the ones after, are right.
func TestSpliceReadElsewhereAfterFillingAhead(t *testing.T) {
	const size = 4<<20 + 9
	data, f, h := splicedObject(t, size, 43, Config{Splice: true, DirectIO: DirectIOAlways, SpliceAhead: true})
	r, ok := spliceRead(h, 0, 1<<20)
	if !ok || r.Data != nil {
		t.Fatal("first read not spliced")
	}
	takeFromPipe(t, r.Pipe.FD, r.Pipe.N)
	waitSocketHolds(t) // the fill ahead takes what has come of the rest
	r.Pipe.Done()
	if readyInPipe(t, h) == 0 {
		t.Fatal("nothing filled ahead after the first reply")
	}
	// Back to 4 KiB in, then on from there.
	if _, ok := spliceRead(h, 4096, 1<<20); ok {
		t.Fatal("a read before the bytes in the pipe was spliced")
	}
	readsOnAfterTheFeed(t, f, h, data, 4096, spliceLeft)
}

// readsOnAfterTheFeed reads h from off to the end of data with ordinary
// reads, checking every byte, and checks that f's one spliced GET ended
// for the reason why; it returns f's metrics.
func readsOnAfterTheFeed(t *testing.T, f *FS, h *Handle, data []byte, off int64, why string) map[string]any {
	t.Helper()
	size := int64(len(data))
	buf := make([]byte, 1<<20)
	for ; off < size; off += int64(len(buf)) {
		k, err := h.ReadAt(context.Background(), buf, off)
		if (err != nil && k != int(size-off)) || !bytes.Equal(buf[:k], data[off:off+int64(k)]) {
			t.Fatalf("ordinary read at %d after the feed ended: %d bytes, %v, or wrong bytes", off, k, err)
		}
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends, want := fmt.Sprint(snap["splice_ends_total"]), "map["+why+":1]"; ends != want {
		t.Errorf("splice ends %s, want %s", ends, want)
	}
	return snap
}

// checkSplicedWhole checks that f's one spliced GET ran to the object's
// end and every one of its size bytes was spliced.
func checkSplicedWhole(t *testing.T, f *FS, size int) {
	t.Helper()
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[done:1]" {
		t.Errorf("splice ends %s, want one done", ends)
	}
	if b := snap["splice_bytes_total"]; b != float64(size) {
		t.Errorf("spliced bytes %v, want %d", b, size)
	}
}

// splicedObject is an object of size random bytes (seed) on a raw-GET store
// of an FS of cfg, opened for splicing.
func splicedObject(t *testing.T, size int, seed uint64, cfg Config) ([]byte, *FS, *Handle) {
	t.Helper()
	ms := newMemStore()
	data := randomBytes(size, seed)
	ms.put("b", "obj", data, "e1")
	f := newTestFS(t, rawMemStore{memStore: ms, t: t}, cfg)
	return data, f, openSpliced(t, f, "obj")
}

// A store wrapped in the fault injector still splices (it passes raw GETs
// through), and its faults reach the spliced GET: one that breaks in its
// body ends the feed as an error where it broke and ordinary reads serve
// the rest, one refused before its reply leaves the read to ordinary
// reads from the start; every byte right either way.
func TestFaultyStoreSplicesAndItsFaultsReachTheSplicedGET(t *testing.T) {
	const size = 5<<20 + 123
	ms := newMemStore()
	data := randomBytes(size, 49)
	ms.put("b", "obj", data, "e1")
	for _, tc := range []struct {
		kind faultstore.FaultKind
		end  string
	}{{faultstore.FaultNone, spliceDone}, {faultstore.FaultEarlyEOF, spliceError}, {faultstore.FaultError, spliceRefused}} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			faulty := faultstore.NewFaulty(rawMemStore{memStore: ms, t: t}, faultstore.FaultConfig{Seed: 3,
				Script: []faultstore.FaultKind{tc.kind}})
			f := newTestFS(t, faulty, Config{Splice: true, DirectIO: DirectIOAlways})
			h := openSpliced(t, f, "obj")
			buf := make([]byte, 1<<20)
			var got []byte
			spliced := 0
			for off := int64(0); off < size; {
				n := int(min(int64(len(buf)), size-off))
				if r, ok := spliceRead(h, off, n); ok {
					var b []byte
					if r.Data != nil {
						b = r.Data
					} else {
						b = takeFromPipe(t, r.Pipe.FD, r.Pipe.N)
						r.Pipe.Done()
					}
					spliced++
					got = append(got, b...)
					off += int64(len(b))
					continue
				}
				k, err := h.ReadAt(context.Background(), buf[:n], off)
				if err != nil || k != n {
					t.Fatalf("ordinary read at %d: %d bytes, %v", off, k, err)
				}
				got = append(got, buf[:k]...)
				off += int64(k)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("bytes differ from the object")
			}
			if (tc.kind == faultstore.FaultNone) != (spliced == (size+len(buf)-1)/len(buf)) {
				t.Errorf("%d of the reads spliced", spliced)
			}
			snap, err := f.m.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if ends, want := fmt.Sprint(snap["splice_ends_total"]), "map["+tc.end+":1]"; ends != want {
				t.Errorf("splice ends %s, want %s", ends, want)
			}
			if n := faulty.Injected(); (n == 1) != (tc.kind != faultstore.FaultNone) {
				t.Errorf("faults injected: %s", faultstore.SortedFaultCounts(faulty.Counts()))
			}
		})
	}
}

// A spliced reply that is never written (go-fuse never calls its Done)
// holds the handle's spliced GET, and only that: another handle's read,
// the handle's own next read (served by the blocks, right) and its close
// all return, each within Config.ReadTimeout of waiting for it; the pipe
// stays the reply's until its Done, which then ends the GET, counted once.
func TestSpliceReplyNeverWrittenBlocksNoReadNorClose(t *testing.T) {
	for _, readFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("read_before_close=%v", readFirst), func(t *testing.T) {
			testSpliceReplyNeverWritten(t, readFirst)
		})
	}
}

func testSpliceReplyNeverWritten(t *testing.T, readFirst bool) {
	const size = 4<<20 + 5
	ms := newMemStore()
	data := randomBytes(size, 49)
	ms.put("b", "obj", data, "e1")
	cfg := Config{Splice: true, DirectIO: DirectIOAlways}
	cfg.ReadTimeout = 200 * time.Millisecond
	f := newTestFS(t, rawMemStore{memStore: ms, t: t}, cfg)
	h := openFile(t, f, "obj")
	if h.spliced == nil {
		t.Fatal("opened without its spliced reader")
	}
	r, ok := spliceRead(h, 0, 1<<20)
	if !ok || r.Pipe == nil {
		t.Fatal("first read not spliced into the pipe")
	}
	// within runs fn and fails the test if it has not returned within a
	// bound far above ReadTimeout: then it waits for the reply's Done.
	within := func(what string, fn func()) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn()
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s waits for a reply that is never written", what)
		}
	}
	readAll := func(h *Handle, off int64) []byte {
		rep, err := h.Read(context.Background(), off, 1<<20)
		if err != nil {
			t.Errorf("read at %d: %v", off, err)
			return nil
		}
		if rep.Pipe != nil {
			t.Errorf("read at %d spliced beside a reply not written", off)
			return nil
		}
		if rep.Data != nil {
			return rep.Data
		}
		defer rep.Release()
		var b []byte
		for _, v := range rep.Views {
			b = append(b, v...)
		}
		return b
	}
	h2 := openFile(t, f, "obj")
	within("another handle's read", func() {
		if b := readAll(h2, 2<<20); !bytes.Equal(b, data[2<<20:3<<20]) {
			t.Error("another handle's read: wrong bytes")
		}
	})
	h2.Close()
	if readFirst {
		within("the handle's next read", func() {
			if b := readAll(h, 1<<20); !bytes.Equal(b, data[1<<20:2<<20]) {
				t.Error("the handle's next read: wrong bytes")
			}
		})
	}
	within("the handle's close", h.Close)

	// Until its Done the pipe is the reply's, whole.
	if k, err := unix.IoctlGetInt(r.Pipe.FD, unix.TIOCINQ); err != nil || k != r.Pipe.N {
		t.Fatalf("the reply's pipe holds %d bytes (%v), want its %d", k, err, r.Pipe.N)
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[]" && ends != "<nil>" {
		t.Fatalf("splice ends %s while the reply is out, want none", ends)
	}
	if b := takeFromPipe(t, r.Pipe.FD, r.Pipe.N); !bytes.Equal(b, data[:1<<20]) {
		t.Fatal("the late reply's bytes differ")
	}
	if taken := r.Pipe.Done(); taken != r.Pipe.N {
		t.Fatalf("done says %d bytes taken, %d were", taken, r.Pipe.N)
	}
	if snap, err = f.m.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[left:1]" {
		t.Errorf("splice ends %s after the late Done, want left:1", ends)
	}
}

// A mapping's first fault on a direct-I/O open starts the whole-object
// splice, as a read(2) at 0 does: the page cache's reads differ only in
// that no stream feed serves them.
func TestPageCacheReadAtStartIsSpliced(t *testing.T) {
	data, _, h := splicedObject(t, 8<<20, 52, Config{Splice: true, DirectIO: DirectIOAlways})
	r, err := h.ReadPageCache(context.Background(), 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// A spliced reply waits in its pipe, or is copied from the socket
	// (Data); the blocks' reply is views of blocks.
	var got []byte
	switch {
	case r.Pipe != nil:
		got = takeFromPipe(t, r.Pipe.FD, r.Pipe.N)
		r.Pipe.Done()
	case r.Data != nil:
		got = r.Data
	default:
		r.Release()
		t.Fatal("the read was not spliced")
	}
	if !bytes.Equal(got, data[:1<<20]) {
		t.Fatal("the first read differs from the object")
	}
}
