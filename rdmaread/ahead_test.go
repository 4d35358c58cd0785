package rdmaread

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// aheadEnv is an engine over a memory store with a small ring: 256 KiB
// slots, 64 of them, so that readahead may hold 32 (8 MiB).
func aheadEnv(t *testing.T, size int, window int64) *flightEnv {
	t.Helper()
	fe := newFlightEnv(t, size, Config{})
	fe.e.cfg.ReadAhead = window
	return fe
}

// readInOrder reads [from, to) through a in reads of step bytes into the
// buffer dst, each at its object offset, and checks every byte.
func readInOrder(t *testing.T, fe *flightEnv, a *Ahead, h cufile.Handle, from, to, step int64) {
	t.Helper()
	for off := from; off < to; off += step {
		r := fe.request(h, off, min(step, to-off), uint64(off), "v1")
		r.Ahead = a
		res, err := fe.e.Read(context.Background(), r)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if res.Bytes != r.Length || res.HTTPBytes != r.Length {
			t.Fatalf("read at %d: %+v, want %d bytes over http", off, res, r.Length)
		}
	}
}

func (fe *flightEnv) counter(t *testing.T, name string) float64 {
	t.Helper()
	families, err := fe.m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s series", name)
	return 0
}

// ringIdle waits until no slot of device 0's ring is out and readahead
// holds none.
func ringIdle(t *testing.T, fe *flightEnv) {
	t.Helper()
	st, err := fe.e.Stager(0)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		held, copying := st.Busy()
		if held == 0 && copying == 0 && fe.e.aheadSlots() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots out of the ring: %d held, %d copying, %v held by readahead", held, copying, fe.e.aheadSlots())
		}
	}
}

// Reads in order of 512 KiB each send far fewer GETs than reads (one per
// quarter of the 8 MiB window once it has grown), land every byte, and the
// file's close gives every slot back.
func TestAheadReadsInOrderSendFewGETs(t *testing.T) {
	const size, step = 48<<20 + 12345, 512 << 10
	fe := aheadEnv(t, size, 8<<20)
	h := fe.buffer(t, "dst", size)
	a := NewAhead()
	readInOrder(t, fe, a, h, 0, size, step)
	if err := fe.check("dst", 0, size, 0); err != nil {
		t.Fatal(err)
	}
	reads, gets := int64((size+step-1)/step), fe.store.gets.Load()
	t.Logf("%d reads, %d GETs", reads, gets)
	if gets > reads/3 {
		t.Fatalf("%d GETs for %d reads in order: not read ahead", gets, reads)
	}
	served := fe.counter(t, "s3gdsfs_gpu_read_ahead_served_bytes_total")
	if served < size/2 {
		t.Fatalf("%v bytes served from readahead of %d read", served, size)
	}
	a.Close()
	ringIdle(t, fe)
	if sent := fe.store.sent.Load(); sent > size+int64(fe.e.cfg.ReadAhead) {
		t.Fatalf("the store sent %d bytes for an object of %d", sent, size)
	}
}

// Reads that are not in order (a seek back, then forward) drop what was
// read ahead and still land the object's bytes.
func TestAheadSeekDropsAndBytesStayRight(t *testing.T) {
	const size = 24 << 20
	fe := aheadEnv(t, size, 4<<20)
	h := fe.buffer(t, "dst", size)
	a := NewAhead()
	readInOrder(t, fe, a, h, 0, 6<<20, 512<<10)
	readInOrder(t, fe, a, h, 1<<20, 3<<20, 512<<10)  // back
	readInOrder(t, fe, a, h, 16<<20, size, 768<<10)  // forward
	readInOrder(t, fe, a, h, 6<<20, 16<<20, 300<<10) // the hole, unaligned
	if err := fe.check("dst", 0, size, 0); err != nil {
		t.Fatal(err)
	}
	if fe.counter(t, "s3gdsfs_gpu_read_ahead_dropped_bytes_total") == 0 {
		t.Fatal("seeks dropped nothing read ahead")
	}
	if fe.counter(t, "s3gdsfs_gpu_read_ahead_served_bytes_total") == 0 {
		t.Fatal("nothing served from readahead")
	}
	a.Close()
	ringIdle(t, fe)
}

// A read that finds no free slot while readahead holds some gets one at
// once: readahead gives its slots back first.
func TestAheadGivesSlotsBackUnderPressure(t *testing.T) {
	const size = 16 << 20
	fe := aheadEnv(t, size, 8<<20)
	h := fe.buffer(t, "dst", size)
	a := NewAhead()
	readInOrder(t, fe, a, h, 0, 2<<20, 256<<10)
	for deadline := time.Now().Add(10 * time.Second); fe.e.aheadSlots() == 0 || fe.counter(t, "s3gdsfs_gpu_read_ahead_bytes_total") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nothing read ahead")
		}
	}
	st, _ := fe.e.Stager(0)
	var taken []*cufile.Slot
	for {
		s := st.TryAcquireSlot()
		if s == nil {
			break
		}
		taken = append(taken, s)
	}
	cp, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slot, err := fe.e.acquireSlot(ctx, cp, 0)
	if err != nil {
		t.Fatalf("a read waiting for a slot while readahead holds %v: %v", fe.e.aheadSlots(), err)
	}
	cp.ReleaseSlot(slot)
	cp.Close()
	for _, s := range taken {
		st.ReleaseSlot(s)
	}
	if fe.counter(t, "s3gdsfs_gpu_read_ahead_dropped_bytes_total") == 0 {
		t.Fatal("nothing counted as dropped")
	}
	// Reading on in order reads ahead again, byte-exact.
	readInOrder(t, fe, a, h, 2<<20, size, 256<<10)
	if err := fe.check("dst", 0, size, 0); err != nil {
		t.Fatal(err)
	}
	a.Close()
	ringIdle(t, fe)
}

// A readahead GET that breaks is asked again from where it broke; one of
// an object that changed drops the readahead: the reads that follow land
// the opened version's bytes or fail with ESTALE, never others.
func TestAheadGETCutAndObjectChanged(t *testing.T) {
	const size = 32 << 20
	fe := aheadEnv(t, size, 8<<20)
	h := fe.buffer(t, "dst", size)
	a := NewAhead()
	readInOrder(t, fe, a, h, 0, 2<<20, 1<<20)
	fe.store.cut.Store(300 << 10) // the next GET breaks after 300 KiB
	readInOrder(t, fe, a, h, 2<<20, 12<<20, 1<<20)
	if err := fe.check("dst", 0, 12<<20, 0); err != nil {
		t.Fatal(err)
	}
	fe.store.replaced.Store(true)
	var stale error
	off := int64(12 << 20)
	for ; off < size; off += 1 << 20 {
		r := fe.request(h, off, 1<<20, uint64(off), "v1")
		r.Ahead = a
		if _, err := fe.e.Read(context.Background(), r); err != nil {
			stale = err
			break
		}
	}
	if !errors.Is(stale, objstore.ErrChanged) {
		t.Fatalf("reads after the object changed: %v, want ESTALE", stale)
	}
	// The read that failed may have landed the part of its range that the
	// readahead held before the GET for the rest failed: the opened
	// version's bytes, and only inside its own destination.
	got, err := os.ReadFile(filepath.Join(fe.dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:off], fe.store.data[:off]) {
		t.Fatal("the reads before the change differ from the object")
	}
	for i := off; i < size; i++ {
		if got[i] != 0xEE && (i >= off+1<<20 || got[i] != fe.store.data[i]) {
			t.Fatalf("byte %d written: neither the failed read's nor the opened version's", i)
		}
	}
	// Dropped without the file's close.
	ringIdle(t, fe)
	a.Close()
}

// Two readers of one file in order at once, each its own half of the
// reads: every byte lands where it should and every slot comes back.
func TestAheadConcurrentReadsOfOneFile(t *testing.T) {
	const size, step = 32 << 20, 1 << 20
	fe := aheadEnv(t, size, 8<<20)
	h := fe.buffer(t, "dst", size)
	a := NewAhead()
	var mu sync.Mutex
	next := int64(0)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				off := next
				next += step
				mu.Unlock()
				if off >= size {
					return
				}
				r := fe.request(h, off, step, uint64(off), "v1")
				r.Ahead = a
				if _, err := fe.e.Read(context.Background(), r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := fe.check("dst", 0, size, 0); err != nil {
		t.Fatal(err)
	}
	a.Close()
	ringIdle(t, fe)
}

// The flag's value is refused below 1 MiB, other than 0.
func TestAheadConfigRefusesATinyWindow(t *testing.T) {
	c := DefaultConfig()
	c.ReadAhead = 4096
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ReadAhead") {
		t.Fatalf("ReadAhead 4096: %v, want a refusal naming ReadAhead", err)
	}
	c.ReadAhead = 0
	if err := c.Validate(); err != nil {
		t.Fatalf("ReadAhead 0 (off): %v", err)
	}
}

// Every readahead series is in docs/metrics.md.
func TestAheadMetricsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s3gdsfs_gpu_read_ahead_bytes_total", "s3gdsfs_gpu_read_ahead_served_bytes_total",
		"s3gdsfs_gpu_read_ahead_dropped_bytes_total", "s3gdsfs_gpu_read_ahead_slots"} {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is registered but not in docs/metrics.md", name)
		}
	}
}

// A window is cut into up to aheadGETs GETs, whatever Streams (which cuts
// single reads) says: one object needs that many in flight to reach the
// server's rate.
func TestAheadPartIsTheWindowOverItsGETs(t *testing.T) {
	for _, streams := range []int{1, 8, 64} {
		e := &Engine{cfg: Config{Streams: streams}}
		for _, c := range []struct{ window, want int64 }{
			{4 << 20, minPart},           // a young window: one part
			{64 << 20, minPart},          // 8 of the smallest parts
			{256 << 20, 16 << 20},        // aheadGETs of them
			{DefaultReadAhead, 32 << 20}, // aheadGETs of the largest
			{2 << 30, aheadPartMax},      // more GETs, none larger
		} {
			if got := e.aheadPart(c.window); got != c.want {
				t.Errorf("Streams %d, window %d MiB: part %d MiB, want %d MiB", streams, c.window>>20, got>>20, c.want>>20)
			}
		}
	}
	e := &Engine{cfg: Config{Streams: 8, PartSize: 4 << 20}}
	if got := e.aheadPart(DefaultReadAhead); got != 4<<20 {
		t.Errorf("PartSize 4 MiB: part %d MiB, want 4", got>>20)
	}
}

// Two files read in order on one device share its readahead: the first,
// which took the whole share while alone, takes no more than half once the
// second reads ahead too, and the second's reads find bytes read ahead for
// them instead of each waiting on a GET of its own.
func TestAheadTwoFilesShareTheDevice(t *testing.T) {
	const size, step = 32 << 20, 256 << 10
	fe := aheadEnv(t, size, 8<<20) // the share: 32 slots of 256 KiB, 8 MiB
	hA, hB := fe.buffer(t, "dstA", size), fe.buffer(t, "dstB", size)
	a, b := NewAhead(), NewAhead()
	defer a.Close()
	defer b.Close()
	readInOrder(t, fe, a, hA, 0, 2<<20, step) // alone: its window grows to the whole share
	d := fe.e.aheadDev(0)
	held := func(x *Ahead) int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.held[x]
	}
	if got := held(a); got <= d.limit/2 {
		t.Fatalf("a file alone holds %d of %d slots: want more than half", got, d.limit)
	}
	servedBefore := fe.counter(t, "s3gdsfs_gpu_read_ahead_served_bytes_total")
	getsBefore := fe.store.gets.Load()
	for off := int64(0); off < 16<<20; off += step {
		readInOrder(t, fe, a, hA, 2<<20+off, 2<<20+off+step, step)
		readInOrder(t, fe, b, hB, off, off+step, step)
	}
	if got := held(a); got > d.limit/2 {
		t.Errorf("the first file holds %d of %d slots beside a second reader: want at most half", got, d.limit)
	}
	if held(b) == 0 {
		t.Errorf("the second file holds no readahead slots")
	}
	// 128 reads of the two: without readahead for the second, its 64
	// reads alone would be 64 GETs.
	served := fe.counter(t, "s3gdsfs_gpu_read_ahead_served_bytes_total") - servedBefore
	if gets := fe.store.gets.Load() - getsBefore; gets > 40 || served < 28<<20 {
		t.Errorf("two files' 32 MiB read in order: %d GETs, %v bytes from readahead; want few GETs and most bytes read ahead", gets, served)
	}
	if err := fe.check("dstA", 0, 18<<20, 0); err != nil {
		t.Fatal(err)
	}
	if err := fe.check("dstB", 0, 16<<20, 0); err != nil {
		t.Fatal(err)
	}
}
