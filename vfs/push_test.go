package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pageCacheImage stands in for the kernel's page cache of one file in the
// unit tests (the integration tests push into the real one through a
// mount). Like the kernel, it holds whole pages only, and the last partial
// page of the file.
type pageCacheImage struct {
	mu     sync.Mutex
	data   []byte
	have   []bool // per page
	stores int
	err    error // returned by every Store once set
}

func newPageCacheImage(size int) *pageCacheImage {
	return &pageCacheImage{data: make([]byte, size), have: make([]bool, (int64(size)+pageSize-1)/pageSize)}
}

func (c *pageCacheImage) Store(off int64, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.stores++
	copy(c.data[off:], p)
	end := off + int64(len(p))
	for pg := (off + pageSize - 1) / pageSize; pg*pageSize < end; pg++ {
		if (pg+1)*pageSize <= end || end == int64(len(c.data)) {
			c.have[pg] = true
		}
	}
	return nil
}

// cachedRun is how many bytes from off the image holds (up to n), or, when
// it does not hold off, minus the bytes from off to its next held page.
func (c *pageCacheImage) cachedRun(off int64, n int64) (held bool, run int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	size := int64(len(c.data))
	end := min(off+n, size)
	held = c.have[off/pageSize]
	pos := off
	for pos < end && c.have[pos/pageSize] == held {
		pos = min((pos/pageSize+1)*pageSize, end)
	}
	return held, pos - off
}

// waitPushIdle waits until h's pusher has nothing queued and no block in
// hand, so that a test reader sees everything pushed so far.
func waitPushIdle(t *testing.T, h *Handle) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		h.push.mu.Lock()
		idle := h.push.workers == 0
		h.push.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("pusher still busy after 5s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func pushConfig() Config {
	const bs = 16 << 10 // four pages: a tripwire is part of a block
	return Config{BlockSize: bs, PartSize: 4 * bs, InitialWindow: bs, MaxWindow: 16 * bs, MemoryLimit: 64 * bs, CacheSize: 32 * bs,
		StreamMinRate: -1}
}

// readLikeTheKernel reads the whole object in chunks of n bytes the way a
// reader of a page-cache file does: what the image holds comes from it,
// only the rest is asked of the handle. It returns the bytes and the
// offsets the handle was asked for.
func readLikeTheKernel(t *testing.T, h *Handle, img *pageCacheImage, n int64) ([]byte, []int64) {
	t.Helper()
	size := h.obj.version.Size
	var out []byte
	var asked []int64
	for pos := int64(0); pos < size; {
		held, run := img.cachedRun(pos, n)
		if held {
			img.mu.Lock()
			out = append(out, img.data[pos:pos+run]...)
			img.mu.Unlock()
			pos += run
			continue
		}
		buf := make([]byte, run)
		got, err := h.ReadAt(context.Background(), buf, pos)
		if err != nil || int64(got) != run {
			t.Fatalf("read %d at %d: %d bytes, %v", run, pos, got, err)
		}
		asked = append(asked, pos)
		out = append(out, buf...)
		pos += run
		waitPushIdle(t, h)
	}
	return out, asked
}

// A sequential reader of a pushing handle finds the bytes fetched ahead in
// the page cache: it asks the daemon only for the first page of each part
// (the tripwire that tells the daemon where it is) and for what comes
// before the pushes start; every byte is exact and fetched from the store
// once.
func TestPushFeedsTheReaderThroughThePageCache(t *testing.T) {
	s := newMemStore()
	data := randomBytes(200*16<<10+777, 21)
	s.put("b", "obj", data, "e1")
	cfg := pushConfig()
	// Room to cache the whole object, so that only Drop keeps pushed
	// blocks out of the cache.
	cfg.MemoryLimit, cfg.CacheSize = 512*int64(cfg.BlockSize), 256*int64(cfg.BlockSize)
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	img := newPageCacheImage(len(data))
	h.PushTo(img)
	got, asked := readLikeTheKernel(t, h, img, 64<<10)
	h.Close()
	// Pushed blocks leave the daemon's cache (the page cache has them);
	// what stays is what the reader asked for: the tripwires' blocks and
	// the first parts.
	blocks := (int64(len(data)) + int64(cfg.BlockSize) - 1) / int64(cfg.BlockSize)
	if cached := f.blocks.Stats().CachedBlocks; cached > blocks/3 {
		t.Fatalf("%d of %d blocks still cached after the push", cached, blocks)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read through the page cache differs from the object")
	}
	if served := s.served.Load(); served != int64(len(data)) {
		t.Fatalf("%d bytes read from the store for a %d-byte object", served, len(data))
	}
	pushed := counterValue(t, f.m, "push_bytes_total", "")
	if pushed < float64(len(data))*3/4 {
		t.Fatalf("%v of %d bytes pushed", pushed, len(data))
	}
	// After the first parts, the reader asks only for tripwires: the
	// first page of a part.
	part := cfg.PartSize
	late := 0
	for _, off := range asked {
		if off >= 2*part && off%part != 0 {
			late++
		}
	}
	if late > 0 || len(asked) > int(int64(len(data))/part)+4 {
		t.Fatalf("the reader asked the daemon at %v: want the first parts and then only part starts", asked)
	}
	if n := counterValue(t, f.m, "push_failures_total", "ENOENT") + counterValue(t, f.m, "push_failures_total", "other"); n != 0 {
		t.Fatalf("%v push failures", n)
	}
	// Parallel ranged GETs feed a pushing handle, not a stream.
	if n := counterValue(t, f.m, "read_streams_total", ""); n != 0 {
		t.Fatalf("%v streams for a pushing handle, want 0", n)
	}
}

// A push the kernel refuses (it forgot the file, the mount went away) ends
// pushing for the handle, counted once by errno, and the reader reads on
// from the daemon, exact.
func TestPushStopsWhenTheKernelRefuses(t *testing.T) {
	s := newMemStore()
	data := randomBytes(100*16<<10, 22)
	s.put("b", "obj", data, "e1")
	f := newTestFS(t, s, pushConfig())
	for _, c := range []struct {
		err   error
		label string
	}{{fmt.Errorf("FUSE_NOTIFY_STORE: %w", syscall.ENOENT), "ENOENT"}, {errors.New("no errno"), "other"}} {
		h := openFile(t, f, "obj")
		img := newPageCacheImage(len(data))
		img.err = c.err
		h.PushTo(img)
		got, asked := readLikeTheKernel(t, h, img, 64<<10)
		h.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("%v: read differs from the object", c.err)
		}
		if img.stores != 0 || len(asked) != len(data)/(64<<10) {
			t.Fatalf("%v: %d stores taken, %d reads asked of the daemon: want 0 and every read", c.err, img.stores, len(asked))
		}
		if n := counterValue(t, f.m, "push_failures_total", c.label); n != 1 {
			t.Fatalf("%v: %v push failures counted as %s, want 1", c.err, n, c.label)
		}
	}
}

// A random read drops what was queued to push, and nothing is pushed after
// Close.
func TestPushStopsOnRandomReadAndClose(t *testing.T) {
	s := newMemStore()
	data := randomBytes(100*16<<10, 23)
	s.put("b", "obj", data, "e1")
	cfg := pushConfig()
	cfg.NoStream = true
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	img := newPageCacheImage(len(data))
	h.PushTo(img)
	buf := make([]byte, 4096)
	for off := int64(0); off < 4*cfg.PartSize; off += 4096 {
		if _, err := h.ReadAt(context.Background(), buf, off); err != nil {
			t.Fatal(err)
		}
	}
	far := int64(len(data)) - 3*4096
	if _, err := h.ReadAt(context.Background(), buf, far); err != nil {
		t.Fatal(err)
	}
	h.push.mu.Lock()
	queued := h.push.to - h.push.next
	h.push.mu.Unlock()
	if queued != 0 {
		t.Fatalf("%d blocks still queued after a random read", queued)
	}
	waitPushIdle(t, h)
	h.Close()
	img.mu.Lock()
	before := img.stores
	img.mu.Unlock()
	h.push.add(10, 20) // what a late plan would queue
	time.Sleep(20 * time.Millisecond)
	img.mu.Lock()
	after := img.stores
	img.mu.Unlock()
	if after != before {
		t.Fatalf("%d stores after Close", after-before)
	}
	// What was pushed is the object's bytes.
	img.mu.Lock()
	defer img.mu.Unlock()
	for pg, ok := range img.have {
		lo, hi := int64(pg)*pageSize, min(int64(pg+1)*pageSize, int64(len(data)))
		if ok && !bytes.Equal(img.data[lo:hi], data[lo:hi]) {
			t.Fatalf("page %d pushed with other bytes", pg)
		}
	}
}

// A pushing handle's window is held to its share of MaxWindow among the
// files reading, spliced ones too (a spliced reader holds no block memory
// but its replies need the CPU the pushes take), and grows back to the
// whole window once it reads alone.
func TestPushWindowIsShared(t *testing.T) {
	s := newMemStore()
	data := randomBytes(400*16<<10, 24)
	s.put("b", "pushed", data, "e1")
	s.put("b", "spliced", randomBytes(64*16<<10, 25), "e2")
	cfg := pushConfig()
	cfg.Splice = true
	f := newTestFS(t, rawMemStore{memStore: s, t: t}, cfg)
	hp := openFile(t, f, "pushed")
	defer hp.Close()
	hp.PushTo(newPageCacheImage(len(data)))
	window := func() int64 {
		hp.mu.Lock()
		defer hp.mu.Unlock()
		return hp.window
	}
	buf := make([]byte, 16<<10)
	off := int64(0)
	readOn := func(n int) {
		t.Helper()
		for range n {
			if _, err := hp.ReadAt(context.Background(), buf, off); err != nil || !bytes.Equal(buf, data[off:off+int64(len(buf))]) {
				t.Fatalf("read at %d: %v or wrong bytes", off, err)
			}
			off += int64(len(buf))
		}
	}

	hs := openFile(t, f, "spliced")
	hs.AllowSplice()
	spliceWhole(t, hs, 0, 64<<10)
	readOn(60)
	share := cfg.MaxWindow / 2
	if w := window(); w != share {
		t.Fatalf("pushing handle's window %d beside a spliced reader, want its share %d", w, share)
	}
	hs.Close()
	if n := f.splicingHandles.Load(); n != 0 {
		t.Fatalf("%d splicing handles counted after the spliced file closed", n)
	}
	readOn(60)
	if w := window(); w != cfg.MaxWindow {
		t.Fatalf("pushing handle's window %d reading alone, want the whole %d", w, cfg.MaxWindow)
	}
}
