package vfs

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
)

// streamEnds waits until n streams have ended (their goroutines finish
// after the reads that fed them) and returns the count for why.
func streamEnds(t *testing.T, f *FS, n int, why string) float64 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		total := 0.0
		for _, w := range []string{streamDone, streamOvertaken, streamIdle, streamSlow, streamError} {
			total += counterValue(t, f.m, "read_stream_ends_total", w)
		}
		if total >= float64(n) {
			return counterValue(t, f.m, "read_stream_ends_total", why)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d streams ended after 5s", total, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// readRange reads h sequentially over [off, end) (or to the end of the
// object, whichever comes first) in chunks of n bytes; it does not call
// t.Fatal, so readers in goroutines can use it.
func readRange(h *Handle, off, end int64, n int) ([]byte, error) {
	var got []byte
	buf := make([]byte, n)
	for off < end {
		m, err := h.ReadAt(context.Background(), buf[:min(int64(n), end-off)], off)
		if err != nil {
			return got, fmt.Errorf("read at %d: %w", off, err)
		}
		if m == 0 {
			break
		}
		got = append(got, buf[:m]...)
		off += int64(m)
	}
	return got, nil
}

// readAll reads h sequentially from off to the end in chunks of n bytes.
func readAll(t *testing.T, h *Handle, off int64, n int) []byte {
	t.Helper()
	got, err := readRange(h, off, math.MaxInt64, n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (m *memStore) getLog() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.gets...)
}

// fetchedBytes sums the lengths of every GET so far.
func fetchedBytes(t *testing.T, gets []string) int64 {
	t.Helper()
	var sum int64
	for _, g := range gets {
		_, n := parseGet(t, g)
		sum += n
	}
	return sum
}

func TestReaderFromTheStartIsFedByOneWholeObjectGET(t *testing.T) {
	s := newMemStore()
	data := randomBytes(300*4096+123, 11)
	s.put("b", "obj", data, "e1")
	f := newTestFS(t, s, smallConfig())
	h := openFile(t, f, "obj")
	if got := readAll(t, h, 0, 3000); !bytes.Equal(got, data) {
		t.Fatalf("streamed read differs from the object (%d vs %d bytes)", len(got), len(data))
	}
	h.Close()
	if gets := s.getLog(); len(gets) != 1 || gets[0] != "obj@0+"+strconv.Itoa(len(data)) {
		t.Fatalf("GETs %v: want one for the whole object", gets)
	}
	if got := s.served.Load(); got != int64(len(data)) {
		t.Fatalf("%d bytes read from the store for a %d-byte object", got, len(data))
	}
	if n := counterValue(t, f.m, "read_streams_total", ""); n != 1 {
		t.Fatalf("%v streams counted, want 1", n)
	}
	if n := streamEnds(t, f, 1, streamDone); n != 1 {
		t.Fatalf("stream did not end as done")
	}
	// The window still grew: the stream is read no further than it.
	if h.blocks.ahead.window() != f.cfg.MaxWindow {
		t.Fatalf("window %d, want %d", h.blocks.ahead.window(), f.cfg.MaxWindow)
	}
}

func TestStreamsCanBeTurnedOff(t *testing.T) {
	s := newMemStore()
	data := randomBytes(100*4096, 12)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	cfg.NoStream = true
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	defer h.Close()
	if got := readAll(t, h, 0, 4096); !bytes.Equal(got, data) {
		t.Fatal("read differs from the object")
	}
	gets := s.getLog()
	if len(gets) < 5 || fetchedBytes(t, gets) != int64(len(data)) {
		t.Fatalf("GETs %v: want ranged GETs covering the object once", gets)
	}
	if n := counterValue(t, f.m, "read_streams_total", ""); n != 0 {
		t.Fatalf("%v streams with streams off", n)
	}
}

// A stream slower than StreamMinRate hands over to ranged GETs once it has
// carried its probe; the bytes stay exact and nothing is fetched twice.
func TestSlowStreamHandsOverToRangedGETs(t *testing.T) {
	s := newMemStore()
	data := randomBytes(300*4096, 13)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	cfg.StreamMinRate = 1 << 62 // nothing is this fast
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	if got := readAll(t, h, 0, 4096); !bytes.Equal(got, data) {
		t.Fatal("read differs from the object")
	}
	h.Close()
	gets := s.getLog()
	if gets[0] != "obj@0+"+strconv.Itoa(len(data)) || len(gets) < 3 {
		t.Fatalf("GETs %v: want the stream, then ranged GETs", gets)
	}
	for _, g := range gets[1:] {
		if strings.HasPrefix(g, "obj@0+") {
			t.Fatalf("a second GET from the start after the hand-over: %v", gets)
		}
	}
	if got := s.served.Load(); got != int64(len(data)) {
		t.Fatalf("%d bytes read from the store for a %d-byte object: some twice", got, len(data))
	}
	if n := streamEnds(t, f, 1, streamSlow); n != 1 {
		t.Fatal("stream did not end as slow")
	}
}

// A stream whose GET breaks, lies about its length or stalls gives what it
// had claimed to ranged GETs: the reader sees exact bytes and no error.
func TestBrokenStreamHandsItsBlocksToRangedGETs(t *testing.T) {
	for _, kind := range []faultstore.FaultKind{faultstore.FaultEarlyEOF, faultstore.FaultLong, faultstore.FaultStallBody, faultstore.FaultError} {
		t.Run(kind.String(), func(t *testing.T) {
			s := newMemStore()
			data := randomBytes(200*4096+77, 14)
			s.put("b", "obj", data, "e1")
			faulty := faultstore.NewFaulty(s, faultstore.FaultConfig{Script: []faultstore.FaultKind{kind}})
			cfg := smallConfig()
			cfg.ReadTimeout = 200 * time.Millisecond
			f := newTestFS(t, faulty, cfg)
			h := openFile(t, f, "obj")
			if got := readAll(t, h, 0, 5000); !bytes.Equal(got, data) {
				t.Fatal("read differs from the object")
			}
			h.Close()
			if faulty.Injected() != 1 {
				t.Fatalf("faults injected: %v", faulty.Counts())
			}
			if n := streamEnds(t, f, 1, streamError); n != 1 {
				snap, _ := f.m.Snapshot()
				t.Fatalf("stream did not end as error: %v; GETs %v", snap["read_stream_ends_total"], s.getLog())
			}
			if len(s.getLog()) < 2 {
				t.Fatalf("GETs %v: want ranged GETs after the stream", s.getLog())
			}
		})
	}
}

// A random read ends the stream; a stream left with nothing to read ends
// after StreamIdle. Either way the reader carries on with ranged GETs.
func TestStreamEndsOnRandomReadAndWhenIdle(t *testing.T) {
	s := newMemStore()
	data := randomBytes(200*4096, 15)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	cfg.StreamIdle = 20 * time.Millisecond
	f := newTestFS(t, s, cfg)

	h := openFile(t, f, "obj")
	buf := make([]byte, 4096)
	for off := int64(0); off < 3*4096; off += 4096 {
		if _, err := h.ReadAt(context.Background(), buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamEnds(t, f, 1, streamIdle); n != 1 {
		t.Fatal("idle stream did not end as idle")
	}
	if got := readAll(t, h, 3*4096, 4096); !bytes.Equal(got, data[3*4096:]) {
		t.Fatal("read after the idle end differs from the object")
	}
	h.Close()
	gets := s.getLog()
	if len(gets) < 2 || fetchedBytes(t, gets[1:]) < int64(len(data))/2 {
		t.Fatalf("GETs %v: want ranged GETs after the idle end", gets)
	}

	// A random read (far from where the reader was) ends the stream too.
	h = openFile(t, f, "obj")
	defer h.Close()
	if _, err := h.ReadAt(context.Background(), buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadAt(context.Background(), buf, 150*4096); err != nil {
		t.Fatal(err)
	}
	if n := streamEnds(t, f, 2, streamDone); n != 1 {
		t.Fatal("stream did not end after a random read")
	}
	if !bytes.Equal(buf, data[150*4096:151*4096]) {
		t.Fatal("random read differs from the object")
	}
}

// A second reader that starts while the first one's stream runs waits on
// the stream's blocks and fetches the rest with ranged GETs; when the first
// reader meets those, its stream ends as overtaken. No byte is fetched
// twice and both read the object exactly.
func TestSecondReaderSharesTheStreamAndOvertakesIt(t *testing.T) {
	s := newMemStore()
	data := randomBytes(30*4096, 16) // fits the cache: nothing evicted
	s.put("b", "obj", data, "e1")
	f := newTestFS(t, s, smallConfig())
	a := openFile(t, f, "obj")
	defer a.Close()
	half, err := readRange(a, 0, 12*4096, 4096)
	if err != nil || len(half) != 12*4096 {
		t.Fatalf("first reader's first half: %d bytes, %v", len(half), err)
	}
	b := openFile(t, f, "obj")
	if got := readAll(t, b, 0, 4096); !bytes.Equal(got, data) {
		t.Fatal("second reader's bytes differ from the object")
	}
	b.Close()
	rest := readAll(t, a, 12*4096, 4096)
	if !bytes.Equal(append(half, rest...), data) {
		t.Fatal("first reader's bytes differ from the object")
	}
	gets := s.getLog()
	if got := s.served.Load(); got != int64(len(data)) {
		t.Fatalf("GETs %v carried %d bytes for a %d-byte object", gets, got, len(data))
	}
	if n := streamEnds(t, f, 1, streamOvertaken); n != 1 {
		t.Fatalf("first reader's stream did not end as overtaken (GETs %v)", gets)
	}
}

// Four sequential readers with a cache of one block or none, reading in
// block-sized or unaligned pieces: what the prefetcher (ranged GETs or a
// stream) fetched ahead waits for its reader instead of being dropped by
// the cache limit, and a block a reader has half read stays for the rest of
// it, so every byte comes from the store once.
func TestBlocksFetchedAheadWaitForTheirReaders(t *testing.T) {
	for _, c := range []struct {
		noStream  bool
		cacheSize int64
		readSize  int
	}{{false, 4096, 4096}, {true, 4096, 4096}, {false, -1, 3000}, {true, -1, 3000}} {
		s := newMemStore()
		var datas [][]byte
		for i := range 4 {
			d := randomBytes(120*4096, uint64(40+i))
			datas = append(datas, d)
			s.put("b", "o"+strconv.Itoa(i), d, "e")
		}
		cfg := smallConfig()
		cfg.CacheSize = c.cacheSize
		cfg.MemoryLimit = 128 * 4096 // room for every reader's window
		cfg.NoStream = c.noStream
		f := newTestFS(t, s, cfg)
		var wg sync.WaitGroup
		for i := range 4 {
			h := openFile(t, f, "o"+strconv.Itoa(i))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer h.Close()
				got, err := readRange(h, 0, math.MaxInt64, c.readSize)
				if err != nil {
					t.Errorf("reader %d: %v", i, err)
					return
				}
				if !bytes.Equal(got, datas[i]) {
					t.Errorf("reader %d: bytes differ from the object", i)
				}
			}()
		}
		wg.Wait()
		if got, want := s.served.Load(), int64(4*120*4096); got != want {
			t.Errorf("%+v: %d bytes read from the store for %d of objects", c, got, want)
		}
	}
}

// With many files reading, each handle's window is held to its share of
// half the block memory, so every reader's prefetch fits instead of some
// reading block by block; files open but not read take no share.
func TestWindowsShareBlockMemory(t *testing.T) {
	s := newMemStore()
	s.put("b", "obj", randomBytes(100*4096, 17), "e")
	f := newTestFS(t, s, smallConfig()) // 64 blocks of memory, windows up to 16
	var hs []*Handle
	for range 8 {
		hs = append(hs, openFile(t, f, "obj"))
	}
	// Files open but not read take no share.
	readAll(t, hs[0], 0, 4096)
	if hs[0].blocks.ahead.window() != f.cfg.MaxWindow {
		t.Fatalf("one of 8 open files reading: window %d, want %d", hs[0].blocks.ahead.window(), f.cfg.MaxWindow)
	}
	for _, h := range hs[1:] {
		readAll(t, h, 90*4096, 4096)
	}
	readAll(t, hs[0], 0, 4096) // back to the start: the window starts small again
	if want := int64(64 * 4096 / 2 / 8); hs[0].blocks.ahead.window() > want {
		t.Fatalf("with 8 files reading the window grew to %d bytes, want at most %d", hs[0].blocks.ahead.window(), want)
	}
	for _, h := range hs[1:] {
		h.Close()
	}
	h := openFile(t, f, "obj") // two open now: the full window again
	defer h.Close()
	defer hs[0].Close()
	readAll(t, h, 0, 4096)
	if h.blocks.ahead.window() != f.cfg.MaxWindow {
		t.Fatalf("with 2 files open the window is %d, want %d", h.blocks.ahead.window(), f.cfg.MaxWindow)
	}
}

// Two readers of one object with no block cache, the second a few blocks
// behind the first: the blocks the first has read are kept for the second,
// so every byte comes from the store once (but the blocks the first passed
// before the second read at all: a handle that has not read is no reader
// yet), with a stream or ranged GETs. A reader further behind than its
// window gets none kept and fetches for itself.
func TestBlocksPassedAreKeptForReadersBehind(t *testing.T) {
	for _, c := range []struct {
		noStream bool
		readSize int64
		behind   int64 // reads
		shared   bool
	}{{false, 4096, 3, true}, {true, 4096, 3, true}, {false, 3000, 5, true}, {true, 3000, 5, true}, {false, 4096, 40, false}} {
		s := newMemStore()
		const blocks = 200
		data := randomBytes(blocks*4096, 61)
		s.put("b", "obj", data, "e")
		cfg := smallConfig()
		cfg.CacheSize = -1 // none
		cfg.NoStream = c.noStream
		f := newTestFS(t, s, cfg)
		a, b := openFile(t, f, "obj"), openFile(t, f, "obj")
		var gotA, gotB []byte
		read := func(h *Handle, got *[]byte) {
			p, err := readRange(h, int64(len(*got)), int64(len(*got))+c.readSize, int(c.readSize))
			if err != nil {
				t.Fatal(err)
			}
			*got = append(*got, p...)
		}
		for range c.behind {
			read(a, &gotA)
		}
		for len(gotB) < len(data) {
			if len(gotA) < len(data) {
				read(a, &gotA)
			}
			read(b, &gotB)
		}
		a.Close()
		b.Close()
		if !bytes.Equal(gotA, data) || !bytes.Equal(gotB, data) {
			t.Fatalf("%+v: bytes differ from the object", c)
		}
		served, kept := s.served.Load(), counterValue(t, f.m, "blocks_kept_for_readers_total", "")
		early := (c.behind + 1) * c.readSize / 4096 * 4096 // the blocks a read through before b's first read
		if c.shared && (served != int64(len(data))+early || kept == 0) {
			t.Errorf("%+v: %d bytes from the store for a %d-byte object, %v blocks kept: want each byte once, and %d bytes again", c, served, len(data), kept, early)
		}
		if !c.shared && (served < int64(len(data))*3/2 || kept != 0) {
			t.Errorf("%+v: %d bytes from the store for a %d-byte object, %v blocks kept: want none kept for a reader beyond its window", c, served, len(data), kept)
		}
	}
}

// A loader's threads reading one descriptor: each takes the next chunk and
// reads it in order, the reads of all of them interleaved. Each is
// followed as a stream of its own, fed ahead by GETs of several blocks;
// none fetches into the chunk another stream started in, so with no cache
// no block comes from the store twice; and a stream whose reader has
// reached the next chunk's start makes way for the next.
func TestInterleavedReadersOfOneHandleAreStreamsOfTheirOwn(t *testing.T) {
	s := newMemStore()
	const blocks, chunk, threads = 256, 32 * 4096, 4
	data := randomBytes(blocks*4096, 21)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	cfg.CacheSize = -1 // none (testConfig): a block read is gone: a second fetch would show
	cfg.MemoryLimit = 256 * 4096
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	defer h.Close()
	var pos [threads]int64 // where each thread reads next; -1: done
	nextChunk := int64(0)
	take := func(i int) {
		if nextChunk >= int64(len(data)) {
			pos[i] = -1
			return
		}
		pos[i] = nextChunk
		nextChunk += chunk
	}
	for i := range pos {
		take(i)
	}
	reads := 0
	buf := make([]byte, 4096)
	for active := threads; active > 0; {
		active = 0
		for i := range pos {
			if pos[i] < 0 {
				continue
			}
			active++
			n, err := h.ReadAt(context.Background(), buf, pos[i])
			if err != nil || n != len(buf) || !bytes.Equal(buf, data[pos[i]:pos[i]+4096]) {
				t.Fatalf("thread %d at %d: n=%d err=%v, or bytes differ", i, pos[i], n, err)
			}
			reads++
			if pos[i] += 4096; pos[i]%chunk == 0 {
				take(i)
			}
		}
	}
	gets := s.getLog()
	t.Logf("%d reads, %d GETs: %v", reads, len(gets), gets)
	if len(gets)*2 > reads {
		t.Errorf("%d GETs for %d interleaved sequential reads: want under half as many", len(gets), reads)
	}
	// Bytes read from the store: the first read's whole-object GET,
	// ended by the second stream, is read no further than its claims.
	if got := s.served.Load(); got != int64(len(data)) {
		t.Errorf("%d bytes read from the store for a %d-byte object read once", got, len(data))
	}
	h.blocks.ahead.mu.Lock()
	defer h.blocks.ahead.mu.Unlock()
	if n := len(h.blocks.ahead.streams); n > threads {
		t.Errorf("%d streams followed after %d threads read on through the chunks: finished ones stay", n, threads)
	}
}

// A read that continues no stream starts one; with maxStreams followed,
// the one read least recently makes way. A stream continues from where its
// last read ended, and, once sequential, from up to a part behind or two
// ahead of it, the nearest stream taking the read.
func TestStreamsAreFoundByTheirPlaceAndTheOldestMakesWay(t *testing.T) {
	s := newMemStore()
	const region = 64 * 4096 // a part is 4 blocks: regions far apart
	s.put("b", "obj", randomBytes((maxStreams+2)*region, 22), "e1")
	cfg := smallConfig()
	cfg.NoStream = true
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	defer h.Close()
	p := &h.blocks.ahead
	for i := range maxStreams + 1 {
		off := int64(i+1) * region // not at 0: no first read from the start
		if p.plan(off, off+4096) {
			t.Fatalf("first read of region %d taken as sequential", i)
		}
		if !p.plan(off+4096, off+2*4096) {
			t.Fatalf("second read of region %d not taken as sequential", i)
		}
	}
	p.mu.Lock()
	n := len(p.streams)
	var starts []int64
	for _, st := range p.streams {
		starts = append(starts, st.start)
	}
	p.mu.Unlock()
	if n != maxStreams || slices.Contains(starts, region) {
		t.Fatalf("%d streams starting at %v: want %d, the first region's gone", n, starts, maxStreams)
	}
	// Out of order within a part back or two ahead of a sequential stream.
	const part = 4 * 4096
	next := int64(3)*region + 2*4096 // where region 3's stream reads next
	if !p.plan(next-part, next-part+4096) || !p.plan(next+2*part, next+2*part+4096) {
		t.Fatal("reads a part behind and two parts ahead of a sequential stream not taken as its")
	}
	next += 2*part + 4096
	if p.plan(next+3*part, next+3*part+4096) {
		p.mu.Lock()
		for _, st := range p.streams {
			t.Logf("stream %d next %d streak %v", st.start, st.nextOff, st.streak)
		}
		p.mu.Unlock()
		t.Fatalf("a read three parts ahead of a stream (at %d) taken as sequential", next+3*part)
	}
}
