package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// testConfig is cfg with DefaultConfig's value in each field cfg leaves 0,
// and 0 where it says -1 (no cache, no retries, never slow), so that a
// test names only what it is about.
func testConfig(cfg Config) Config {
	d := DefaultConfig()
	or := func(v *int64, def int64) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			*v = 0
		}
	}
	ord := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	ord(&cfg.MetaTTL, d.MetaTTL)
	ord(&cfg.NegativeTTL, d.NegativeTTL)
	ord(&cfg.ReadTimeout, d.ReadTimeout)
	ord(&cfg.StreamIdle, d.StreamIdle)
	if cfg.MetaEntries == 0 {
		cfg.MetaEntries = d.MetaEntries
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = d.BlockSize
	}
	retries := int64(cfg.Retries)
	or(&retries, int64(d.Retries))
	cfg.Retries = int(retries)
	or(&cfg.PartSize, d.PartSize)
	or(&cfg.InitialWindow, d.InitialWindow)
	or(&cfg.MaxWindow, d.MaxWindow)
	or(&cfg.MemoryLimit, d.MemoryLimit)
	or(&cfg.CacheSize, d.CacheSize)
	or(&cfg.StreamMinRate, d.StreamMinRate)
	or(&cfg.DirectIOMinSize, d.DirectIOMinSize)
	return cfg
}

func newTestFS(t *testing.T, store objstore.Store, cfg Config) *FS {
	t.Helper()
	if cfg.Bucket == "" {
		cfg.Bucket = "b"
	}
	var f *FS
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	f, err := New(store, testConfig(cfg), m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func listAll(t *testing.T, f *FS, dir Entry) []Entry {
	t.Helper()
	r := f.ReadDir(dir)
	var all []Entry
	for {
		batch, err := r.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			return all
		}
		all = append(all, batch...)
	}
}

func names(es []Entry) string {
	var s []string
	for _, e := range es {
		n := e.Name
		if e.Dir {
			n += "/"
		}
		s = append(s, n)
	}
	return strings.Join(s, " ")
}

func TestNameProblem(t *testing.T) {
	cases := map[string]string{
		"ok.bin":                 "",
		"":                       skipEmptySegment,
		".":                      skipDotName,
		"..":                     skipDotName,
		"...":                    "",
		strings.Repeat("x", 255): "",
		strings.Repeat("x", 256): skipTooLong,
		"a\x00b":                 skipBadByte,
		"ctl\uFFFD.txt":          skipReplacement,
		"ctl\x01.txt":            "",
		"latin1-\xe9":            skipInvalidUTF8, // the S3 client refuses it in requests
	}
	for name, want := range cases {
		if got := nameProblem(name); got != want {
			t.Errorf("nameProblem(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestReadDirSkipsUnrepresentableKeysAndDirectoryWins(t *testing.T) {
	s := newMemStore()
	for _, k := range []string{
		"d/a", "d/a/inner", // a file and a directory named "a": the directory wins
		"d/a-b",              // sorts between "a" and "a/"
		"d//empty",           // empty segment
		"d/./dot", "d/../up", // dot names
		"d/" + strings.Repeat("n", 256), // too long
		"d/",                            // the directory's own marker
		"d/z",
	} {
		s.put("b", k, []byte("x"), "e")
	}
	f := newTestFS(t, s, Config{})
	d, err := f.Lookup(context.Background(), f.Root(), "d")
	if err != nil || !d.Dir {
		t.Fatalf("lookup d: %+v %v", d, err)
	}
	if got, want := sortedNames(listAll(t, f, d)), "a-b a/ z"; got != want {
		t.Fatalf("listing = %q, want %q", got, want)
	}
	// Lookup agrees with the listing: "a" is the directory.
	a, err := f.Lookup(context.Background(), d, "a")
	if err != nil || !a.Dir {
		t.Fatalf("lookup a = %+v, %v; want the directory", a, err)
	}
	// Each skipped key is counted once, even when listed twice.
	listAll(t, f, d)
	for reason, want := range map[string]float64{skipEmptySegment: 1, skipDotName: 2, skipTooLong: 1, skipShadowed: 1} {
		if got := counterValue(t, f.m, "skipped_keys_total", reason); got != want {
			t.Errorf("skipped %s = %v, want %v", reason, got, want)
		}
	}
}

func sortedNames(es []Entry) string {
	s := strings.Fields(names(es))
	sort.Strings(s)
	return strings.Join(s, " ")
}

func counterValue(t *testing.T, m *metrics.Set, name, label string) float64 {
	t.Helper()
	v, err := m.Value(name, label)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestReadDirStreamsPagesWithoutDuplicates(t *testing.T) {
	s := newMemStore()
	s.pageSize = 100
	for i := range 1050 {
		s.put("b", fmt.Sprintf("p/k%05d", i), []byte{1}, "e")
	}
	// Between pages, keys appear both before and after the cursor, and a
	// key already listed is rewritten: no name may show twice.
	s.beforePage = func(page int) {
		if page == 3 {
			s.put("b", "p/k00000", []byte{2}, "e2")
			s.put("b", "p/k00500x", []byte{3}, "e")
			s.put("b", "p/a-new", []byte{3}, "e")
		}
	}
	f := newTestFS(t, s, Config{})
	all := listAll(t, f, Entry{Dir: true, Bucket: "b", Key: "p/"})
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.Name] {
			t.Fatalf("%s listed twice", e.Name)
		}
		seen[e.Name] = true
	}
	for i := range 1050 {
		if !seen[fmt.Sprintf("k%05d", i)] {
			t.Fatalf("k%05d missing from a listing of %d entries", i, len(all))
		}
	}
	if s.pages < 11 {
		t.Fatalf("listing took %d pages; want it paged (>= 11)", s.pages)
	}
}

func TestLookupNegativeIsCached(t *testing.T) {
	s := newMemStore()
	s.put("b", "x", []byte("1"), "e")
	f := newTestFS(t, s, Config{})
	if _, err := f.Lookup(context.Background(), f.Root(), "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
	s.put("b", "missing", []byte("now here"), "e")
	if _, err := f.Lookup(context.Background(), f.Root(), "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("within the negative TTL the miss should be remembered, got %v", err)
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func openFile(t *testing.T, f *FS, name string) *Handle {
	t.Helper()
	e, err := f.Lookup(context.Background(), f.Root(), name)
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.Open(e)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// ReadAt fills p from off through the blocks, the reader that serves
// every read (the tests' ordinary reads); fewer bytes only at the end of
// the object.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	r, err := h.blocks.read(ctx, off, len(p), false)
	if err != nil {
		return 0, err
	}
	defer r.Release()
	n := 0
	for _, v := range r.Views {
		n += copy(p[n:], v)
	}
	return n, nil
}

// smallConfig has 4 KiB blocks. Streams are never judged slow here: with
// such blocks (and the race detector) a stream's rate says nothing.
func smallConfig() Config {
	return Config{BlockSize: 4096, PartSize: 4 * 4096, InitialWindow: 4096, MaxWindow: 16 * 4096, MemoryLimit: 64 * 4096, CacheSize: 32 * 4096,
		StreamMinRate: -1}
}

func TestSequentialReadIsExactAndWindowGrows(t *testing.T) {
	s := newMemStore()
	data := randomBytes(300*4096+123, 1)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	cfg.NoStream = true // ranged GETs: stream_test.go covers streams
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	if got := readAll(t, h, 0, 3000); !bytes.Equal(got, data) { // reads not aligned to blocks
		t.Fatalf("sequential read differs from the object (%d vs %d bytes)", len(got), len(data))
	}
	if h.blocks.ahead.window() != f.cfg.MaxWindow {
		t.Fatalf("window = %d after a long sequential read, want the cap %d", h.blocks.ahead.window(), f.cfg.MaxWindow)
	}
	// The first GET is one block (quick first byte); later ones are whole parts.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gets[0] != "obj@0+8192" && s.gets[0] != "obj@0+4096" {
		t.Fatalf("first GET %s: want a small first request", s.gets[0])
	}
	parts := 0
	for _, g := range s.gets {
		if strings.HasSuffix(g, "+16384") {
			parts++
		}
	}
	if parts < len(s.gets)/2 {
		t.Fatalf("only %d of %d GETs were whole parts: %v", parts, len(s.gets), s.gets)
	}
}

// A reader that goes down the object, each read ending where the one
// before began (a copy out of a mapping that runs backward), is a stream
// too: it is fed ahead below its reads by whole parts, not a GET per read,
// and every byte is right.
func TestBackwardReadIsExactAndFedAhead(t *testing.T) {
	s := newMemStore()
	const size = 300*4096 + 123
	data := randomBytes(size, 5)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	cfg.NoStream = true
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	const step = 4096 + 100 // reads not aligned to blocks, about a block each
	got := make([]byte, size)
	reads := 0
	for end := int64(size); end > 0; end -= step {
		off := max(end-step, 0)
		if n, err := h.ReadAt(context.Background(), got[off:end], off); err != nil || n != int(end-off) {
			t.Fatalf("read [%d, %d): %d bytes, %v", off, end, n, err)
		}
		reads++
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the backward read differs from the object")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := 0
	for _, g := range s.gets {
		if strings.HasSuffix(g, "+16384") {
			parts++
		}
	}
	// As random reads they would take a GET each at least.
	if len(s.gets) > reads/2 || parts < len(s.gets)/2 {
		t.Fatalf("%d reads backward took %d GETs, %d of them whole parts: want few, mostly parts: %v", reads, len(s.gets), parts, s.gets)
	}
}

// Random reads fetch the blocks they span and nothing more, and the missing
// blocks of one read come in one ranged GET, not one round trip after
// another.
func TestRandomReadsFetchOnlyTheirBlocksInOneGET(t *testing.T) {
	s := newMemStore()
	data := randomBytes(200*4096, 2)
	s.put("b", "obj", data, "e1")
	cfg := smallConfig()
	f := newTestFS(t, s, cfg)
	h := openFile(t, f, "obj")
	defer h.Close()
	r := rand.New(rand.NewPCG(3, 3))
	var spanned int64
	reads := 0
	for range 60 {
		n := 1 + r.IntN(3*4096) // up to three blocks, less than a part
		off := 4096 + int64(r.IntN(len(data)-n-4096))
		buf := make([]byte, n)
		before := len(s.getLog())
		got, err := h.ReadAt(context.Background(), buf, off)
		if err != nil || got != n || !bytes.Equal(buf, data[off:off+int64(n)]) {
			t.Fatalf("random read %d@%d: n=%d err=%v, bytes equal=%v", n, off, got, err, bytes.Equal(buf[:got], data[off:off+int64(got)]))
		}
		lo, hi := off/4096*4096, (off+int64(n)+4095)/4096*4096
		for _, g := range s.getLog()[before:] {
			if a, l := parseGet(t, g); a < lo || a+l > hi {
				t.Fatalf("random read %d@%d fetched %s, outside its blocks [%d, %d)", n, off, g, lo, hi)
			}
		}
		spanned += ((off+int64(n)-1)/4096 - off/4096 + 1) * 4096
		reads++
	}
	if got := s.served.Load(); got > spanned {
		t.Fatalf("%d random reads spanning %d bytes of blocks fetched %d bytes", reads, spanned, got)
	}
	// Three whole blocks nobody has read: one GET of exactly those.
	before := len(s.getLog())
	if _, err := h.ReadAt(context.Background(), make([]byte, 3*4096), 0); err != nil {
		t.Fatal(err)
	}
	if gets := s.getLog()[before:]; len(gets) != 1 || gets[0] != "obj@0+12288" {
		t.Fatalf("a three-block read at 0 sent %v, want one GET of those blocks", gets)
	}
}

func TestReadPastEOFIsShort(t *testing.T) {
	s := newMemStore()
	s.put("b", "obj", []byte("hello"), "e")
	f := newTestFS(t, s, smallConfig())
	h := openFile(t, f, "obj")
	buf := make([]byte, 10)
	n, err := h.ReadAt(context.Background(), buf, 2)
	if err != nil || string(buf[:n]) != "llo" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	if n, err := h.ReadAt(context.Background(), buf, 5); n != 0 || err != nil {
		t.Fatalf("read at EOF: %d, %v", n, err)
	}
}

func TestChangedObjectFailsAndIsForgotten(t *testing.T) {
	s := newMemStore()
	s.put("b", "obj", randomBytes(64*4096, 4), "v1")
	f := newTestFS(t, s, smallConfig())
	h := openFile(t, f, "obj")
	buf := make([]byte, 4096)
	if _, err := h.ReadAt(context.Background(), buf, 0); err != nil {
		t.Fatal(err)
	}
	s.put("b", "obj", randomBytes(64*4096, 5), "v2")
	_, err := h.ReadAt(context.Background(), buf, 40*4096)
	if !errors.Is(err, objstore.ErrChanged) {
		t.Fatalf("read after replacement: %v, want ErrChanged", err)
	}
	// The next lookup asks the store again and sees the new version.
	e, err := f.Lookup(context.Background(), f.Root(), "obj")
	if err != nil || e.Version.ETag != "v2" {
		t.Fatalf("lookup after change: %+v %v", e.Version, err)
	}
}

// A refused configuration names the field, and no flag: the command names
// its flags itself.
func TestConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{BlockSize: 100}, "BlockSize 100: "},
		{Config{PartSize: 3<<20 + 1<<19}, "PartSize 3584KiB: a multiple of the block size (1MiB)"},
		{Config{MemoryLimit: 1 << 20}, "MemoryLimit 1MiB: "},
		{Config{CacheSize: 4 << 30}, "CacheSize 4GiB: "},
		{Config{MaxWindow: 1 << 12, InitialWindow: 1 << 20}, "MaxWindow 4KiB: "},
		{Config{MetaTTL: -time.Second}, "MetaTTL -1s: "},
		{Config{NegativeTTL: -time.Second}, "NegativeTTL -1s: "},
		{Config{ReadLimits: objstore.ReadLimits{ReadTimeout: -time.Second}}, "ReadTimeout -1s: must be above 0"},
	} {
		err := testConfig(c.cfg).Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: error %v, want one naming %q and no flag", c.cfg, err, c.want)
		}
	}
	bad := testConfig(Config{})
	bad.Retries = -2
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "Retries -2: ") {
		t.Errorf("Retries -2: %v", err)
	}
	// Zero is a value, not "the default": a core made of a zero
	// configuration is refused rather than quietly given one.
	if _, err := New(nil, Config{}, metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("New with a zero Config: no error")
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
}

// Prefetch says how far it got: with memory for only some blocks it stops
// there, and the handle then expects no more than that.
func TestPrefetchShortOfMemoryReportsWhereItStopped(t *testing.T) {
	s := newMemStore()
	data := randomBytes(64*4096, 4)
	s.put("b", "obj", data, "e1")
	f := newTestFS(t, s, smallConfig()) // 64 blocks of memory
	var held []*cache.Block
	for range 64 - 3 { // other readers hold all but three blocks
		b, err := f.blocks.NewBlock(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
	}
	h := openFile(t, f, "obj")
	if reached := f.fetch.prefetch(h.obj, 0, 10); reached != 3 {
		t.Fatalf("prefetch with memory for 3 blocks reached block %d, want 3", reached)
	}
	for _, b := range held {
		b.Release()
	}
	if reached := f.fetch.prefetch(h.obj, 0, 10); reached != 10 {
		t.Fatalf("prefetch with memory free reached block %d, want 10", reached)
	}
	// And the handle: a sequential reader whose prefetch is cut short is
	// not told that the rest is on its way. First let the downloads above
	// finish, so the memory left free below is exactly two blocks.
	for deadline := time.Now().Add(5 * time.Second); ; {
		f.fetch.mu.Lock()
		busy := len(f.fetch.inflight)
		f.fetch.mu.Unlock()
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d downloads still running", busy)
		}
		time.Sleep(time.Millisecond)
	}
	held = held[:0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 64 - 2 { // readers' blocks: the blocks fetched ahead above make room
		b, err := f.blocks.NewBlock(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
	}
	defer func() {
		for _, b := range held {
			b.Release()
		}
	}()
	s.put("b", "obj2", randomBytes(64*4096, 5), "e2")
	h2 := openFile(t, f, "obj2")
	st := &seqStream{window: 16 * 4096} // as after a few sequential reads
	h2.blocks.ahead.streams = []*seqStream{st}
	h2.blocks.ahead.plan(0, 4096)
	h2.blocks.ahead.mu.Lock()
	defer h2.blocks.ahead.mu.Unlock()
	if st.prefetchedTo > 2*4096 {
		t.Fatalf("with memory for two blocks the handle expects blocks up to %d, want at most 2", st.prefetchedTo/4096)
	}
}

// A directory listed whole answers a second listing and the lookups of its
// names, listed or not, without a request, for --meta-ttl; one listed past
// the bound is not kept.
func TestListedDirectoryAnswersListingsAndLookups(t *testing.T) {
	s := newMemStore()
	s.pageSize = 10
	for i := range 25 {
		s.put("b", fmt.Sprintf("d/k%02d", i), []byte{1}, "e")
	}
	s.put("b", "d/a", []byte{1}, "e")
	s.put("b", "d/a/inner", []byte{1}, "e") // the directory wins
	f := newTestFS(t, s, Config{MetaTTL: time.Hour, NegativeTTL: time.Millisecond})
	now := time.Now()
	f.listed.now = func() time.Time { return now }
	d := Entry{Dir: true, Bucket: "b", Key: "d/"}
	first := names(listAll(t, f, d))
	pages := s.pages
	if got := names(listAll(t, f, d)); got != first || s.pages != pages {
		t.Fatalf("second listing %q after %d more pages; want %q from the cache", got, s.pages-pages, first)
	}
	f.meta.InvalidatePrefix("") // only the listing answers now
	if e, err := f.Lookup(context.Background(), d, "k07"); err != nil || e.Dir || e.Key != "d/k07" {
		t.Fatalf("lookup k07 = %+v, %v", e, err)
	}
	if e, err := f.Lookup(context.Background(), d, "a"); err != nil || !e.Dir {
		t.Fatalf("lookup a = %+v, %v; want the directory", e, err)
	}
	s.put("b", "d/new", []byte{1}, "e")
	if _, err := f.Lookup(context.Background(), d, "new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("lookup of a name not listed: %v, want ErrNotFound from the listing", err)
	}
	if s.pages != pages {
		t.Fatalf("lookups sent %d listings", s.pages-pages)
	}
	// Past the TTL the store is asked again.
	now = now.Add(2 * time.Hour)
	f.meta.InvalidatePrefix("")
	if _, err := f.Lookup(context.Background(), d, "new"); err != nil {
		t.Fatalf("lookup of new after the TTL: %v", err)
	}
	pages = s.pages
	listAll(t, f, d)
	if s.pages == pages {
		t.Fatal("no listing after the TTL")
	}

	// A listing longer than the bound is not kept.
	small := newTestFS(t, s, Config{MetaEntries: 20})
	listAll(t, small, d)
	pages = s.pages
	listAll(t, small, d)
	if s.pages == pages {
		t.Fatal("a listing past the bound was cached")
	}
}

// Lookups that keep missing in a directory never listed list it whole in
// the background and answer from that listing: the directory still wins
// over a file of its name, and a name added after it is not found.
func TestLookupsThatKeepMissingListTheDirectory(t *testing.T) {
	s := newMemStore()
	s.pageSize = 10
	for i := range 25 {
		s.put("b", fmt.Sprintf("d/k%02d", i), []byte{1}, "e")
	}
	s.put("b", "d/zz", []byte{1}, "e")
	s.put("b", "d/zz/inner", []byte{1}, "e") // the directory wins
	f := newTestFS(t, s, Config{MetaTTL: time.Hour, NegativeTTL: time.Millisecond})
	d := Entry{Dir: true, Bucket: "b", Key: "d/"}
	for i := range loadAfter {
		if e, err := f.Lookup(context.Background(), d, fmt.Sprintf("k%02d", i)); err != nil || e.Dir {
			t.Fatalf("lookup k%02d = %+v, %v", i, e, err)
		}
	}
	if f.listed.get(d.Path()) == nil {
		t.Fatalf("after %d lookups that missed, the directory is not listed", loadAfter)
	}
	s.put("b", "d/new", []byte{1}, "e")
	pages := s.pages
	if e, err := f.Lookup(context.Background(), d, "zz"); err != nil || !e.Dir {
		t.Fatalf("lookup zz = %+v, %v; want the directory", e, err)
	}
	if e, err := f.Lookup(context.Background(), d, "k20"); err != nil || e.Dir || e.Key != "d/k20" {
		t.Fatalf("lookup k20 = %+v, %v", e, err)
	}
	if _, err := f.Lookup(context.Background(), d, "new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("lookup of a name added after the listing: %v, want ErrNotFound from it", err)
	}
	if s.pages != pages {
		t.Fatalf("lookups after the listing sent %d LISTs", s.pages-pages)
	}
}
