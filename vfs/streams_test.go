package vfs

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readReply serves a read of h through all its readers and gives back what
// the reply holds (replyBytes).
func readReply(t *testing.T, h *Handle, off int64, n int) ([]byte, error) {
	r, err := h.Read(context.Background(), off, n)
	if err != nil {
		return nil, err
	}
	return replyBytes(r)
}

// replyBytes copies a reply out as the FUSE layer writes it (taking a
// spliced reply out of its pipe) and gives back what it holds, releasing
// its blocks or its pipe.
func replyBytes(r Reply) ([]byte, error) {
	switch {
	case r.Pipe != nil:
		out := make([]byte, r.Pipe.N)
		for got := 0; got < len(out); {
			k, err := unix.Read(r.Pipe.FD, out[got:])
			if err != nil || k == 0 {
				r.Pipe.Done()
				return nil, fmt.Errorf("pipe read after %d of %d bytes: %v", got, len(out), err)
			}
			got += k
		}
		if taken := r.Pipe.Done(); taken != len(out) {
			return nil, fmt.Errorf("done says %d taken, %d were", taken, len(out))
		}
		return out, nil
	case r.Data != nil:
		return r.Data, nil
	}
	defer r.Release()
	var out []byte
	for _, v := range r.Views {
		out = append(out, v...)
	}
	return out, nil
}

// preadChunks reads the object through h as a parallel loader does:
// threads take chunk after chunk from one queue and read each in order in
// reads of read bytes, as the kernel splits one large pread. It returns
// what they read, in place.
func preadChunks(t *testing.T, h *Handle, size int, chunk, read, threads int) []byte {
	t.Helper()
	got := make([]byte, size)
	var mu sync.Mutex
	next := 0
	errs := make(chan error, threads)
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				off := next
				next += chunk
				mu.Unlock()
				if off >= size {
					return
				}
				for at := off; at < min(off+chunk, size); {
					n := min(read, off+chunk-at)
					b, err := readReply(t, h, int64(at), n)
					if err == nil && len(b) != min(n, size-at) {
						err = fmt.Errorf("read of %d at %d: %d bytes", n, at, len(b))
					}
					if err != nil {
						errs <- err
						return
					}
					copy(got[at:], b)
					at += len(b)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return got
}

// Threads that pread chunks of one handle are each served from a spliced
// GET of their own stream: every byte spliced, one GET per stream rather
// than per block. Without stream feeds the same reads are copied out of
// blocks, which the test sees.
func TestStreamFeedsSpliceEachThreadsPreads(t *testing.T) {
	const size = 48<<20 + 77
	for _, streams := range []bool{true, false} {
		t.Run(fmt.Sprintf("streams=%v", streams), func(t *testing.T) {
			data, f, h := splicedObject(t, size, 11, Config{Splice: true, SpliceStreams: streams, DirectIO: DirectIOAlways})
			got := preadChunks(t, h, size, 8<<20, 1<<20, 4)
			if !bytes.Equal(got, data) {
				t.Fatal("the chunks read are not the object's bytes")
			}
			snap, err := f.m.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			spliced, gets := snap["splice_bytes_total"].(float64), snap["splice_stream_gets_total"].(float64)
			if !streams {
				if spliced >= size/2 || gets != 0 {
					t.Fatalf("without stream feeds: %v bytes spliced, %v stream GETs; want most read from blocks", spliced, gets)
				}
				return
			}
			// A reply whose bytes the socket brought in small buffers is
			// copied from the socket (the last 77 bytes here can be): it
			// is the stream's still, and no block is read.
			if copied := snap["splice_small_buffer_bytes_total"].(float64); spliced+copied != size || spliced < size-1<<20 {
				t.Errorf("%v of %d bytes spliced, %v copied from the socket", spliced, size, copied)
			}
			if misses := snap["block_cache_misses_total"].(float64); misses != 0 {
				t.Errorf("%v blocks fetched", misses)
			}
			// Seven chunks after the first, each at most one GET (a thread
			// that picks up where another stream stands reads on from its GET).
			if gets < 1 || gets > 6 {
				t.Errorf("%v stream GETs for 6 chunks after the whole-object GET's", gets)
			}
		})
	}
}

// A stream's read that runs past its GET's range is served by the blocks,
// whole and right, and its stream's later reads with it.
func TestStreamReadPastItsRangeFallsBackWhole(t *testing.T) {
	const size = streamRange + 8<<20
	data, f, h := splicedObject(t, size, 12, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	const read = 3 << 20
	off := int64(4 << 20)
	for ; off+read <= size; off += read {
		b, err := readReply(t, h, off, read)
		if err != nil || !bytes.Equal(b, data[off:off+read]) {
			t.Fatalf("read at %d: %v, or not the object's bytes", off, err)
		}
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// The GET's range ends 4 MiB + 64 MiB in, inside the 22nd read.
	if spliced := snap["splice_bytes_total"].(float64); spliced != 21*read {
		t.Errorf("%v bytes spliced, want the 21 reads inside the stream's range (%d)", spliced, 21*read)
	}
}

// A handle whose file another handle reads through the blocks stops
// splicing its streams at their next read (the blocks are shared; two
// GETs of the same bytes are not), and starts no more.
func TestStreamFeedsEndWhenAnotherHandleReads(t *testing.T) {
	const size = 40 << 20
	data, f, h := splicedObject(t, size, 13, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	at := int64(8 << 20)
	if b, err := readReply(t, h, at, 1<<20); err != nil || !bytes.Equal(b, data[at:at+1<<20]) {
		t.Fatalf("first read: %v, or wrong bytes", err)
	}
	other := openFile(t, f, "obj")
	defer other.Close()
	buf := make([]byte, 1<<20)
	if _, err := other.ReadAt(context.Background(), buf, 0); err != nil || !bytes.Equal(buf, data[:1<<20]) {
		t.Fatalf("the other handle's read: %v, or wrong bytes", err)
	}
	for _, off := range []int64{at + 1<<20, 24 << 20} {
		if _, ok := spliceRead(h, off, 1<<20); ok {
			t.Fatalf("read at %d spliced while another handle reads the file", off)
		}
		if b, err := readReply(t, h, off, 1<<20); err != nil || !bytes.Equal(b, data[off:off+1<<20]) {
			t.Fatalf("read at %d: %v, or wrong bytes", off, err)
		}
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[shared:1]" {
		t.Errorf("splice ends %s, want the stream's GET ended as shared", ends)
	}
}

// A handle read at random in large reads leaves its first stream feed
// after one read; each later one is given that read's size, so that every
// GET is read to its end and the server sends nothing that nobody reads.
func TestRandomLargeReadsGetWhatTheyRead(t *testing.T) {
	const size = 96 << 20
	data, f, h := splicedObject(t, size, 14, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	offs := []int64{40, 8, 72, 24, 88, 56, 16, 80, 32, 64}
	for _, mib := range offs {
		off := mib << 20
		b, err := readReply(t, h, off, 1<<20)
		if err != nil || !bytes.Equal(b, data[off:off+1<<20]) {
			t.Fatalf("read at %d MiB: %v, or not the object's bytes", mib, err)
		}
		time.Sleep(firstReadIdle + 20*time.Millisecond)
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != fmt.Sprintf("map[done:%d left:1]", len(offs)-1) {
		t.Errorf("splice ends %s, want the first feed left and each later one read to its end", ends)
	}
	if spliced := snap["splice_bytes_total"].(float64); spliced != float64(len(offs)<<20) {
		t.Errorf("%v bytes spliced, want every read's", spliced)
	}
}

// A stream that reads on past its feed's end shows that the range it was
// given (the chunk the last overtaken stream had read) was short: each
// next feed's range is twice the last, up to streamRange.
func TestStreamReadingOnDoublesItsRange(t *testing.T) {
	const size = 48 << 20
	data, f, h := splicedObject(t, size, 15, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	h.spliced.fit.Store(4 << 20) // as if a stream of 4 MiB had been overtaken
	for off := int64(8 << 20); off < 40<<20; off += 1 << 20 {
		b, err := readReply(t, h, off, 1<<20)
		if err != nil || !bytes.Equal(b, data[off:off+1<<20]) {
			t.Fatalf("read at %d: %v, or not the object's bytes", off, err)
		}
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// 8-12, 12-20, 20-36 MiB, then 36 MiB on with a range of 32.
	if gets := snap["splice_stream_gets_total"].(float64); gets != 4 {
		t.Errorf("%v stream GETs for 32 MiB read on from a 4 MiB range, want 4", gets)
	}
	if fit := h.spliced.fit.Load(); fit != 32<<20 {
		t.Errorf("the next feed's range is %d MiB, want 32", fit>>20)
	}
}

// A handle has at most maxStreamFeeds stream feeds: the next stream's
// read, while every feed is in use (its reply still being written), is
// served by the blocks, right.
func TestStreamFeedsAreBounded(t *testing.T) {
	const size = (2*maxStreamFeeds + 4) << 20
	data, f, h := splicedObject(t, size, 16, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	var out []*PipeReply
	for i := int64(1); i <= maxStreamFeeds; i++ {
		off := 2 * i << 20
		r, err := h.Read(context.Background(), off, 1<<20)
		if err != nil || r.Pipe == nil {
			t.Fatalf("read at %d MiB: %v, or not spliced", 2*i, err)
		}
		out = append(out, r.Pipe)
	}
	off := int64(2*maxStreamFeeds+2) << 20
	b, err := readReply(t, h, off, 1<<20)
	if err != nil || !bytes.Equal(b, data[off:off+1<<20]) {
		t.Fatalf("the read past the bound: %v, or not the object's bytes", err)
	}
	for i, p := range out {
		at := int64(2*(i+1)) << 20
		if got := takeFromPipe(t, p.FD, p.N); !bytes.Equal(got, data[at:at+1<<20]) {
			t.Fatalf("stream at %d MiB: not the object's bytes", 2*(i+1))
		}
		p.Done()
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if gets := snap["splice_stream_gets_total"].(float64); gets != maxStreamFeeds {
		t.Errorf("%v stream GETs, want %d", gets, maxStreamFeeds)
	}
	if refused := fmt.Sprint(snap["splice_ends_total"]); refused != "map[refused:1]" {
		t.Errorf("splice ends %s, want the stream past the bound refused", refused)
	}
}

// A stream feed whose GET is cut mid-body hands its reader to the blocks
// at once, which fetch from where it stood, and the handle starts no more
// feeds (the blocks' GETs are retried): every byte right, the feed counted
// as ended by an error.
func TestStreamFeedCutMidBodyFallsBackToBlocks(t *testing.T) {
	const size = 32 << 20
	ms := newMemStore()
	data := randomBytes(size, 17)
	ms.put("b", "obj", data, "e1")
	f := newTestFS(t, rawMemStore{memStore: ms, t: t, cutAt: 3<<20 + 5}, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	h := openSpliced(t, f, "obj")
	for off := int64(8 << 20); off < 24<<20; off += 1 << 20 {
		b, err := readReply(t, h, off, 1<<20)
		if err != nil || !bytes.Equal(b, data[off:off+1<<20]) {
			t.Fatalf("read at %d MiB: %v, or not the object's bytes", off>>20, err)
		}
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[error:1]" {
		t.Errorf("splice ends %s, want the cut feed's error", ends)
	}
	if spliced := snap["splice_bytes_total"].(float64); spliced != 3<<20 {
		t.Errorf("%v bytes spliced, want the 3 MiB before the cut", spliced)
	}
}

// A page-cache read a little ahead of the whole-object GET (the reader
// stepped over pages the page cache has) waits, in case the reads before it
// were sent with it; when they do not come, the GET passes over them and
// serves it, and goes on to the end of the object.
func TestPageCacheReadAheadPassesWhatTheReaderSteppedOver(t *testing.T) {
	const size, step = 16 << 20, 1 << 20
	data, f, h := splicedObject(t, size, 18, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	read := pageCacheReads(h, data, step)
	offs := []int64{0, step}
	for off := int64(5 * step); off < size; off += step {
		offs = append(offs, off)
	}
	for _, off := range offs {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	snap := metricsSnapshot(t, f)
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[done:1]" {
		t.Errorf("splice ends %s, want the whole-object GET read to its end", ends)
	}
	if skipped := snap["splice_skipped_bytes_total"].(float64); skipped != 3*step {
		t.Errorf("%v bytes skipped, want the 3 MiB stepped over", skipped)
	}
	if gets := snap["splice_stream_gets_total"].(float64); gets != 0 {
		t.Errorf("%v stream GETs for the page cache's reads", gets)
	}
}

// A mapping's reader that touches each tensor's first page before it
// reads them in order (safetensors' load_file onto the CPU, then a copy of
// each tensor): the touches, far from the whole-object GET, are served
// aside by the blocks, and the GET, waiting, serves the reads in order,
// stepping over the pages the touches brought in without waiting for
// them: one GET to the end, every byte right.
func TestPageCacheReadsAsideKeepTheWholeObjectGET(t *testing.T) {
	// SpliceAhead: the next reply's bytes wait in the spare pipe when the
	// GET steps over pages.
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("SpliceAhead=%v", ahead), func(t *testing.T) { readsAsideKeepTheGET(t, ahead) })
	}
}

func readsAsideKeepTheGET(t *testing.T, spliceAhead bool) {
	const size, step = 32 << 20, 1 << 20
	data, f, h := splicedObject(t, size, 25, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways, SpliceAhead: spliceAhead})
	read := pageCacheReads(h, data, step)
	touched := map[int64]bool{8 * step: true, 16 * step: true, 24 * step: true}
	if err := read(0); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{8 * step, 16 * step, 24 * step} {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	for off := int64(step); off < size; off += step {
		if !touched[off] {
			if err := read(off); err != nil {
				t.Fatal(err)
			}
		}
	}
	snap := metricsSnapshot(t, f)
	wantOneSplicedGET(t, f, size-3*step)
	if aside := snap["splice_aside_reads_total"].(float64); aside != 3 {
		t.Errorf("%v reads aside, want the 3 touches", aside)
	}
	if skipped := snap["splice_skipped_bytes_total"].(float64); skipped != 3*step {
		t.Errorf("%v bytes skipped, want the 3 MiB the touches read", skipped)
	}
	if waits := snap["splice_reorder_waits_total"].(float64); waits != 0 {
		t.Errorf("%v reads waited for their turn: the GET knew the touches' pages and passed them at once", waits)
	}
}

// A reader that goes on in order elsewhere than the whole-object GET
// stands is no longer its reader: past the reach of the kernel's requests,
// the GET ends there and the blocks, which fetch ahead, serve it, right.
func TestPageCacheReadsInOrderElsewhereEndTheWholeObjectGET(t *testing.T) {
	const size, step = 32 << 20, 1 << 20
	for name, offs := range map[string][]int64{"forward": {16, 17, 18, 19, 20, 21, 22, 23}, "backward": {31, 30, 29, 28, 27, 26, 25, 24}} {
		t.Run(name, func(t *testing.T) {
			data, f, h := splicedObject(t, size, 26, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
			read := pageCacheReads(h, data, step)
			for _, off := range []int64{0, step} {
				if err := read(off); err != nil {
					t.Fatal(err)
				}
			}
			for _, off := range offs {
				if err := read(off * step); err != nil {
					t.Fatal(err)
				}
			}
			snap := metricsSnapshot(t, f)
			if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[left:1]" {
				t.Errorf("splice ends %s, want the whole-object GET left for the reader elsewhere", ends)
			}
			// Four reads of 1 MiB reach as far as the kernel's requests
			// may: the fifth in the run ends the GET.
			if aside := snap["splice_aside_reads_total"].(float64); aside != 4 {
				t.Errorf("%v reads aside, want 4", aside)
			}
		})
	}
}

// A loader reads a file's header, closes it and maps it: the mapping's
// read at 0 may come while the first open is still being closed, its
// spliced GET not yet ended. The open being closed does not keep the
// mapping from a whole-object GET of its own.
func TestAHandleBeingClosedLetsTheNextOpenSplice(t *testing.T) {
	const size, step = 8 << 20, 1 << 20
	data, f, first := splicedObject(t, size, 27, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	if err := pageCacheReads(first, data, step)(0); err != nil {
		t.Fatal(err)
	}
	first.st.closing(first) // as Close does before it ends the GET
	second := openSpliced(t, f, "obj")
	r, err := second.ReadPageCache(context.Background(), 0, step)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pipe == nil {
		t.Fatal("the second open's read at 0 was not spliced")
	}
	if b, err := replyBytes(r); err != nil || !bytes.Equal(b, data[:step]) {
		t.Fatalf("read at 0: %v, or not the object's bytes", err)
	}
	first.Close()
	read := pageCacheReads(second, data, step)
	for off := int64(step); off < size; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	snap := metricsSnapshot(t, f)
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[done:1 left:1]" {
		t.Errorf("splice ends %s, want the first open's left and the second's read to its end", ends)
	}
}

// A page-cache read behind the whole-object GET (pages the kernel dropped
// and asks for again, or a read that came ahead and was passed while it
// waited for its turn) is read aside; the GET goes on for its reader.
func TestPageCacheReadBehindTheWholeObjectGETIsReadAside(t *testing.T) {
	const size, step = 8 << 20, 1 << 20
	data, f, h := splicedObject(t, size, 28, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	read := pageCacheReads(h, data, step)
	for off := int64(0); off < 3*step; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	// A read that came ahead and got its turn once the GET had passed it.
	feed := h.spliced.feed.Load()
	if _, err := h.spliced.serve(context.Background(), feed, step, step, 4*step); err != errBehind {
		t.Fatalf("serve of a read the GET passed: %v, want errBehind", err)
	}
	if err := read(step); err != nil { // behind: read aside
		t.Fatal(err)
	}
	for off := int64(3 * step); off < size; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	wantOneSplicedGET(t, f, size)
	if aside := metricsSnapshot(t, f)["splice_aside_reads_total"].(float64); aside != 1 {
		t.Errorf("%v reads aside, want the one behind", aside)
	}
}

// metricsSnapshot is f's counters now.
func metricsSnapshot(t *testing.T, f *FS) map[string]any {
	t.Helper()
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// pageCacheReads returns a checked page-cache read of step bytes at off
// through h, whose object holds data.
func pageCacheReads(h *Handle, data []byte, step int) func(off int64) error {
	return func(off int64) error {
		r, err := h.ReadPageCache(context.Background(), off, step)
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		b, err := replyBytes(r)
		if err != nil || !bytes.Equal(b, data[off:off+int64(step)]) {
			return fmt.Errorf("read at %d: %v, or not the object's bytes", off, err)
		}
		return nil
	}
}

// awaitReorderWaits waits until f has counted want reads that waited for
// their turn on a spliced GET.
func awaitReorderWaits(t *testing.T, f *FS, want float64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		snap, err := f.m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if snap["splice_reorder_waits_total"].(float64) >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v reads waited for their turn, want %v", snap["splice_reorder_waits_total"], want)
		}
	}
}

// wantOneSplicedGET checks that the whole-object GET served all size bytes
// and was read to its end.
func wantOneSplicedGET(t *testing.T, f *FS, size int) {
	t.Helper()
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[done:1]" {
		t.Errorf("splice ends %s, want the whole-object GET read to its end", ends)
	}
	if spliced := snap["splice_bytes_total"].(float64) + snap["splice_small_buffer_bytes_total"].(float64); spliced != float64(size) {
		t.Errorf("%v bytes from the spliced GET, want all %d", spliced, size)
	}
}

// The kernel's readahead for a mapping's reader sends its next requests
// together, and they reach the daemon in either order: a page-cache read
// that comes ahead of the read before it waits for it, and the
// whole-object GET serves the file to its end, one GET, every byte right.
func TestPageCacheReadsThatComeSwappedKeepTheWholeObjectGET(t *testing.T) {
	const size, step = 16 << 20, 1 << 20
	data, f, h := splicedObject(t, size, 20, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	read := pageCacheReads(h, data, step)
	if err := read(0); err != nil {
		t.Fatal(err)
	}
	// Each pair's second read comes first, and is waiting when the
	// first comes.
	off, waits := int64(step), 0.0
	for ; off+2*step <= size; off += 2 * step {
		ahead := make(chan error, 1)
		go func() { ahead <- read(off + step) }()
		waits++
		awaitReorderWaits(t, f, waits)
		if err := read(off); err != nil {
			t.Fatal(err)
		}
		if err := <-ahead; err != nil {
			t.Fatal(err)
		}
	}
	for ; off < size; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	wantOneSplicedGET(t, f, size)
}

// With a large kernel readahead a mapping's reader has two windows of
// requests out at once: a page-cache read that comes that far ahead of the
// whole-object GET waits for it as long as the reads before it keep it
// moving, though they take longer than reorderWait all told, and the one
// GET serves the file to its end.
func TestPageCacheReadTwoReadaheadWindowsAheadWaitsWhileTheGETMoves(t *testing.T) {
	const size, step = 16 << 20, 1 << 20
	defer func(w time.Duration) { reorderWait = w }(reorderWait)
	reorderWait = 200 * time.Millisecond
	data, f, h := splicedObject(t, size, 22, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways, KernelReadAhead: 4 << 20})
	read := pageCacheReads(h, data, step)
	if err := read(0); err != nil {
		t.Fatal(err)
	}
	// 6 MiB ahead of the GET: more than reorderWindow reads, within two
	// windows of 4 MiB.
	far := int64(7 * step)
	ahead := make(chan error, 1)
	go func() { ahead <- read(far) }()
	awaitReorderWaits(t, f, 1)
	for off := int64(step); off < far; off += step {
		time.Sleep(reorderWait / 4) // 1.5 reorderWaits before the last comes
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-ahead; err != nil {
		t.Fatal(err)
	}
	for off := far + step; off < size; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	wantOneSplicedGET(t, f, size)
}

// A page-cache read ahead of the whole-object GET waits while the reply
// before it holds the GET's turn (go-fuse has yet to write it), however
// long: the reads before it are under way, not gone elsewhere.
func TestPageCacheReadAheadWaitsWhileAReplyHoldsTheTurn(t *testing.T) {
	const size, step = 8 << 20, 1 << 20
	defer func(w time.Duration) { reorderWait = w }(reorderWait)
	reorderWait = 50 * time.Millisecond
	data, f, h := splicedObject(t, size, 23, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	read := pageCacheReads(h, data, step)
	if err := read(0); err != nil {
		t.Fatal(err)
	}
	held, err := h.ReadPageCache(context.Background(), step, step)
	if err != nil {
		t.Fatal(err)
	}
	if held.Pipe == nil {
		t.Fatal("the read at 1 MiB was not spliced")
	}
	ahead := make(chan error, 1)
	go func() { ahead <- read(3 * step) }()
	awaitReorderWaits(t, f, 1)
	time.Sleep(3 * reorderWait)
	b, err := replyBytes(held)
	if err != nil || !bytes.Equal(b, data[step:2*step]) {
		t.Fatalf("the held reply: %v, or not the object's bytes", err)
	}
	if err := read(2 * step); err != nil {
		t.Fatal(err)
	}
	if err := <-ahead; err != nil {
		t.Fatal(err)
	}
	for off := int64(4 * step); off < size; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	wantOneSplicedGET(t, f, size)
}

// The read at 0 may reach the daemon after the one the kernel sent with
// it: the later read waits for the whole-object GET the read at 0 opens,
// and is served from it in its turn.
func TestPageCacheReadBeforeTheFirstWaitsForTheWholeObjectGET(t *testing.T) {
	const size, step = 4 << 20, 1 << 20
	data, f, h := splicedObject(t, size, 21, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	read := pageCacheReads(h, data, step)
	ahead := make(chan error, 1)
	go func() { ahead <- read(step) }()
	awaitReorderWaits(t, f, 1)
	if err := read(0); err != nil {
		t.Fatal(err)
	}
	if err := <-ahead; err != nil {
		t.Fatal(err)
	}
	for off := int64(2 * step); off < size; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	wantOneSplicedGET(t, f, size)
}

// A read the kernel sent with the first waits for the whole-object GET
// while the read at 0 opens it, however long the server takes to answer.
func TestPageCacheReadBeforeTheFirstWaitsWhileTheGETOpens(t *testing.T) {
	const size, step = 4 << 20, 1 << 20
	defer func(w time.Duration) { reorderWait = w }(reorderWait)
	reorderWait = 50 * time.Millisecond
	ms := newMemStore()
	data := randomBytes(size, 24)
	ms.put("b", "obj", data, "e1")
	f := newTestFS(t, rawMemStore{memStore: ms, t: t, headDelay: 3 * reorderWait}, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	h := openSpliced(t, f, "obj")
	read := pageCacheReads(h, data, step)
	first := make(chan error, 1)
	go func() { first <- read(0) }()
	for deadline := time.Now().Add(5 * time.Second); !h.spliced.opening.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the read at 0 did not open the GET")
		}
	}
	if err := read(step); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for off := int64(2 * step); off < size; off += step {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	wantOneSplicedGET(t, f, size)
}

// A pread into a buffer that does not start on a page reaches the daemon
// as a first read short of the largest by less than a page, then reads of
// the largest size: it is a stream's start all the same. A read shorter
// by a page or more is a whole read, served by the blocks.
func TestStreamStartsAtAReadShortOfTheLargestByPartOfAPage(t *testing.T) {
	const size = 32 << 20
	data, f, h := splicedObject(t, size, 19, Config{Splice: true, SpliceStreams: true, DirectIO: DirectIOAlways})
	const largest = 2 << 20
	reads := []struct {
		off int64
		n   int
	}{
		{16 << 20, largest},          // the largest read: a stream
		{4 << 20, largest - 16},      // short of it by part of a page: a stream
		{24 << 20, largest - 8192},   // short by two pages: a whole read
		{4<<20 + largest - 16, 1024}, // the second stream's next read, small, goes on in its feed
	}
	for _, r := range reads {
		b, err := readReply(t, h, r.off, r.n)
		if err != nil || !bytes.Equal(b, data[r.off:r.off+int64(r.n)]) {
			t.Fatalf("read of %d at %d: %v, or not the object's bytes", r.n, r.off, err)
		}
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if gets := snap["splice_stream_gets_total"].(float64); gets != 2 {
		t.Errorf("%v stream GETs, want 2", gets)
	}
	// A reply whose bytes the socket brought in small buffers is copied
	// from the socket, still the feed's.
	spliced, copied := snap["splice_bytes_total"].(float64), snap["splice_small_buffer_bytes_total"].(float64)
	if spliced+copied != float64(2*largest-16+1024) {
		t.Errorf("%v bytes spliced and %v copied from sockets, want %d", spliced, copied, 2*largest-16+1024)
	}
}
