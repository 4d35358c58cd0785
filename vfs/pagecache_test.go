package vfs

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// recordingCache is a page cache that keeps what is stored in it, or
// refuses every store with fail.
type recordingCache struct {
	mu     sync.Mutex
	stores map[int64][]byte
	times  map[int64]int // stores at each offset
	calls  int
	fail   error
}

func (c *recordingCache) Store(off int64, b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.fail != nil {
		return c.fail
	}
	if c.stores == nil {
		c.stores, c.times = make(map[int64][]byte), make(map[int64]int)
	}
	c.stores[off] = bytes.Clone(b)
	c.times[off]++
	return nil
}

// filled is the bytes stored so far and the number of Store calls.
func (c *recordingCache) filled() (n int64, calls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.stores {
		n += int64(len(b))
	}
	return n, c.calls
}

// readThrough reads [off, off+n) with h's Read (cached false: a direct
// read(2)) or ReadPageCache, and checks the bytes against data.
func readThrough(t *testing.T, h *Handle, data []byte, off int64, n int, cached bool) {
	t.Helper()
	read := h.Read
	if cached {
		read = h.ReadPageCache
	}
	r, err := read(context.Background(), off, n)
	if err != nil {
		t.Fatalf("read at %d: %v", off, err)
	}
	var got []byte
	for _, v := range r.Views {
		got = append(got, v...)
	}
	r.Release()
	if !bytes.Equal(got, data[off:min(off+int64(n), int64(len(data)))]) {
		t.Fatalf("read at %d differs from the object", off)
	}
}

// waitFilled waits until c holds at least want bytes, or fails after a
// while.
func waitFilled(t *testing.T, c *recordingCache, want int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, _ := c.filled(); n >= want {
			return
		}
		if time.Now().After(deadline) {
			n, _ := c.filled()
			t.Fatalf("page cache filled with %d bytes, want at least %d", n, want)
		}
	}
}

// fillBlock is the block size of the page-cache tests' mounts.
const fillBlock = 4096

// fillingFS is a mount of one 300-block object, "obj", of ranged GETs,
// that fills page caches: the object's bytes and the mount.
func fillingFS(t *testing.T, seed uint64) ([]byte, *FS) {
	t.Helper()
	s := newMemStore()
	data := randomBytes(300*fillBlock, seed)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	cfg.NoStream = true
	cfg.FillPageCache = true
	return data, newTestFS(t, s, cfg)
}

// openFilling opens "obj" of f with pc as its page cache; the test closes
// it at its end.
func openFilling(t *testing.T, f *FS, pc PageCache) *Handle {
	t.Helper()
	h := openFile(t, f, "obj")
	t.Cleanup(func() { h.Close() })
	h.SetPageCache(pc)
	return h
}

// A stream of reads the page cache sends is filled ahead, every byte
// stored where it belongs; the reads of direct read(2)s of the same
// object fill nothing.
func TestPageCacheReadsAreFilledAheadAndDirectReadsAreNot(t *testing.T) {
	const bs = fillBlock
	data, f := fillingFS(t, 9)

	dc := &recordingCache{}
	direct := openFilling(t, f, dc)
	for off := int64(0); off < int64(len(data)); off += 2 * bs {
		readThrough(t, direct, data, off, 2*bs, false)
	}

	pc := &recordingCache{}
	h := openFilling(t, f, pc)
	const reads = 8
	for off := int64(0); off < reads*bs; off += bs {
		readThrough(t, h, data, off, bs, true)
	}
	// The window has grown past the reads: what it fetched beyond them
	// is filled.
	waitFilled(t, pc, 4*bs)
	pc.mu.Lock()
	for off, b := range pc.stores {
		if off%bs != 0 || !bytes.Equal(b, data[off:off+int64(len(b))]) {
			t.Errorf("stored %d bytes at %d: not the object's block there", len(b), off)
		}
	}
	pc.mu.Unlock()
	// The counter follows each store; the fills may still be going on.
	eventually(t, func() string {
		n, _ := pc.filled()
		if got := counterValue(t, f.m, "page_cache_fill_bytes_total", ""); got != float64(n) {
			return fmt.Sprintf("s3gdsfs_page_cache_fill_bytes_total = %v, want the %d bytes stored", got, n)
		}
		return ""
	})
	if n, calls := dc.filled(); n != 0 || calls != 0 {
		t.Errorf("direct reads filled the page cache: %d bytes in %d stores", n, calls)
	}
}

// A read the page cache sends out of its stream's order (the kernel's
// readahead of one fault ahead of another's) starts a second stream
// inside what the first has filled: the two fill each block once, and
// what either read is not filled.
func TestOverlappingStreamsFillEachBlockOnce(t *testing.T) {
	const bs = fillBlock
	data, f := fillingFS(t, 11)
	pc := &recordingCache{}
	h := openFilling(t, f, pc)
	for i := int64(0); i < 16; i++ {
		readThrough(t, h, data, i*bs, bs, true)
	}
	// The first stream's window reaches block 29, filled ahead.
	eventually(t, func() string {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		if _, ok := pc.stores[29*bs]; !ok {
			return "block 29 not filled ahead of the first stream"
		}
		return ""
	})
	// Beyond two parts ahead of the first stream: a stream of its own,
	// sequential from its second read, whose third sends a window over
	// block 29 out (its nearer blocks are read or left to the kernel). Its reads stop short of it until its fills have found
	// it filled.
	for i := int64(25); i < 28; i++ {
		readThrough(t, h, data, i*bs, bs, true)
	}
	eventually(t, func() string {
		if got := counterValue(t, f.m, "page_cache_fill_skips_total", "filled"); got < 1 {
			return fmt.Sprintf("s3gdsfs_page_cache_fill_skips_total{reason=filled} = %v, want the second stream to find blocks filled", got)
		}
		return ""
	})
	for i := int64(28); i < 60; i++ {
		readThrough(t, h, data, i*bs, bs, true)
	}
	for i := int64(16); i < 25; i++ {
		readThrough(t, h, data, i*bs, bs, true)
	}
	time.Sleep(50 * time.Millisecond) // let the last fills land
	h.Close()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for off, n := range pc.times {
		if n > 1 {
			t.Errorf("block at %d stored %d times", off, n)
		}
		if b := pc.stores[off]; !bytes.Equal(b, data[off:off+int64(len(b))]) {
			t.Errorf("stored %d bytes at %d: not the object's block there", len(b), off)
		}
	}
}

// A kernel that refuses a fill (the inode forgotten) stops the handle's
// fills; its reads go on, exact.
func TestRefusedPageCacheFillStopsTheHandlesFills(t *testing.T) {
	const bs = fillBlock
	data, f := fillingFS(t, 10)
	pc := &recordingCache{fail: fmt.Errorf("notify store: %w", syscall.ENOENT)}
	h := openFilling(t, f, pc)
	readThrough(t, h, data, 0, bs, true)
	readThrough(t, h, data, bs, bs, true)
	for deadline := time.Now().Add(10 * time.Second); !h.cacheRefused.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a refused fill did not stop the handle's fills")
		}
	}
	for off := int64(2 * bs); off < int64(len(data)); off += bs {
		readThrough(t, h, data, off, bs, true)
	}
	// Only fills already past the check when the first was refused may
	// have called Store.
	if _, calls := pc.filled(); calls > fillWorkers {
		t.Errorf("%d stores after the kernel refused one, want at most %d (those already under way)", calls, fillWorkers)
	}
	eventually(t, func() string {
		if got := counterValue(t, f.m, "page_cache_fill_skips_total", "refused"); got < 1 {
			return fmt.Sprintf("s3gdsfs_page_cache_fill_skips_total{reason=refused} = %v, want at least 1", got)
		}
		return ""
	})
}

// eventually waits until check returns "", or fails with what it last
// returned after a while.
func eventually(t *testing.T, check func() string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
	}
}

// settle waits until c's stores have stopped for a few milliseconds (the
// fills a read set off have landed), or a second has passed.
func settle(c *recordingCache) {
	_, last := c.filled()
	quiet := 0
	for deadline := time.Now().Add(time.Second); quiet < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		if _, calls := c.filled(); calls != last {
			last, quiet = calls, 0
		} else {
			quiet++
		}
	}
}

// The block left out of a fill for the kernel to read lies half a window
// short of the range's far end (above it for a stream going up, below for
// one going down), and inside the range however small.
func TestTriggerBlockIsHalfAWindowFromTheFarEnd(t *testing.T) {
	for _, tc := range []struct {
		back                  bool
		from, reached, window int64
		want                  int64
	}{
		{false, 10, 42, 32, 26},
		{true, 10, 42, 32, 25},
		{false, 10, 12, 32, 10},
		{true, 10, 12, 32, 11},
		{false, 5, 6, 1, 5},
		{true, 5, 6, 1, 5},
	} {
		if got := triggerBlock(tc.back, tc.from, tc.reached, tc.window); got != tc.want {
			t.Errorf("triggerBlock(back %v, [%d, %d), window %d) = %d, want %d", tc.back, tc.from, tc.reached, tc.window, got, tc.want)
		}
	}
	if got := fillOrder(true, 3, 7, 5); !slices.Equal(got, []int64{6, 4, 3}) {
		t.Errorf("fillOrder going down = %v, want [6 4 3]", got)
	}
	if got := fillOrder(false, 3, 7, 5); !slices.Equal(got, []int64{3, 4, 6}) {
		t.Errorf("fillOrder going up = %v, want [3 4 6]", got)
	}
}

// A reader that finds its pages filled reads only the pages that are not
// (as a mapping's faults do): the trigger blocks keep its stream fetching
// and filling to the end of the object, every byte stored or read exact,
// in a few reads, each for a block fetched ahead already (without them the
// reader runs into the end of what was fetched, and waits for a GET).
func TestReaderOfFilledPagesIsFedToTheEnd(t *testing.T) {
	const bs = fillBlock
	data, f := fillingFS(t, 12)
	pc := &recordingCache{}
	h := openFilling(t, f, pc)
	blocks := int64(len(data)) / bs
	read := make(map[int64]bool)
	reads := 0
	for i := int64(0); i < blocks; i++ {
		pc.mu.Lock()
		_, stored := pc.stores[i*bs]
		pc.mu.Unlock()
		if !stored {
			// Past the stream's first reads, a missing page is a trigger
			// block: fetched ahead, its read sends the next range out
			// before the reader reaches the end of what is filled.
			if blk, err := f.fetch.held(context.Background(), h.obj, i); err != nil || blk == nil {
				if reads > 2 {
					t.Errorf("block %d, read %d: not fetched ahead when the reader got to it", i, reads)
				}
			} else {
				blk.Release()
			}
			// The kernel asks for a missing page; the fills under way
			// may then cover the next ones before the reader gets there.
			readThrough(t, h, data, i*bs, bs, true)
			read[i] = true
			reads++
			settle(pc)
		}
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for i := int64(0); i < blocks; i++ {
		b, stored := pc.stores[i*bs]
		if !stored && !read[i] {
			t.Fatalf("block %d neither filled nor read", i)
		}
		if stored && !bytes.Equal(b, data[i*bs:(i+1)*bs]) {
			t.Fatalf("block %d filled with other bytes", i)
		}
	}
	t.Logf("%d reads of %d blocks", reads, blocks)
	if reads > int(blocks)/2 {
		t.Errorf("%d reads of %d blocks: the fills did not keep ahead of the reader", reads, blocks)
	}
}
