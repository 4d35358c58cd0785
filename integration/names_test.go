package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// An object replaced under an open reader fails the read with ESTALE, and
// the very next open reads the new version, well within --meta-ttl: the
// ESTALE drops the kernel's entry for the name as well as the daemon's.
func TestOpenAfterESTALESeesTheNewVersionAtOnce(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 8 << 20
	srv.PutRandomObject(t, "data", "sub/x.bin", size, 1)
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Core.CacheSize = 2 << 20
		c.Core.MaxWindow = 1 << 20
		c.Core.NoStream = true // ranged GETs, pinned with If-Match
		// The default TTLs: a minute for the kernel's entry and attributes.
	})
	path, f := openListed(t, mp, "sub", "x.bin")
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	newSum := srv.PutRandomObject(t, "data", "sub/x.bin", size, 2)
	if _, err := f.ReadAt(make([]byte, 1<<20), 6<<20); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read after replacement: %v, want ESTALE", err)
	}
	start := time.Now()
	if got := fileSHA256(t, path, 1<<20); got != newSum {
		t.Fatalf("open after ESTALE read sha256 %s, want the new version's %s", got, newSum)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("new open took %s", took)
	}
}

// countingStore counts LIST and HEAD requests, and apart the LISTs of
// whole directories (not of one key).
type countingStore struct {
	objstore.Store
	mu                sync.Mutex
	lists, stat, full int
}

func (c *countingStore) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (objstore.Page, error) {
	c.mu.Lock()
	c.lists++
	if maxKeys != 1 {
		c.full++
	}
	c.mu.Unlock()
	return c.Store.List(ctx, bucket, prefix, cont, maxKeys)
}

func (c *countingStore) Stat(ctx context.Context, bucket, key string) (objstore.Object, error) {
	c.mu.Lock()
	c.stat++
	c.mu.Unlock()
	return c.Store.Stat(ctx, bucket, key)
}

// take returns the counts since the last take.
func (c *countingStore) take() (lists, heads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lists, heads = c.lists, c.stat
	c.lists, c.stat, c.full = 0, 0, 0
	return lists, heads
}

// takeFull returns the LISTs of whole directories since the last take, and
// takes all.
func (c *countingStore) takeFull() (full, lists, heads int) {
	c.mu.Lock()
	full = c.full
	c.mu.Unlock()
	lists, heads = c.take()
	return full, lists, heads
}

// A directory listed whole answers, for --meta-ttl, a second ls and the
// lookups and opens of its names, listed or not, without a LIST or HEAD;
// after the TTL the store is asked again and a name added since is found.
func TestListedDirectoryAnswersWithoutRequests(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	for i := range 30 {
		srv.PutObject(t, "data", fmt.Sprintf("dir/f%02d", i), []byte(fmt.Sprint(i)))
	}
	srv.PutObject(t, "data", "dir/sub/inner", []byte("inner"))
	const ttl = 3 * time.Second
	counts := &countingStore{}
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Core.MetaTTL = ttl
		c.Core.NegativeTTL = 500 * time.Millisecond
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { counts.Store = s; return counts }))
	dir := filepath.Join(mp, "dir")
	start := time.Now()
	ls := func() int {
		t.Helper()
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	if n := ls(); n != 31 {
		t.Fatalf("listed %d, want 31", n)
	}
	if lists, _ := counts.take(); lists == 0 {
		t.Fatal("the first ls sent no LIST")
	}
	if n := ls(); n != 31 {
		t.Fatalf("second ls listed %d, want 31", n)
	}
	for i := range 30 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)))
		if err != nil || string(b) != fmt.Sprint(i) {
			t.Fatalf("f%02d: %q, %v", i, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "sub")); err != nil || !st.IsDir() {
		t.Fatalf("sub: %v, %v", st, err)
	}
	srv.PutObject(t, "data", "dir/late", []byte("late"))
	if _, err := os.Stat(filepath.Join(dir, "late")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a name added after the listing, within the TTL: %v, want ENOENT from the listing", err)
	}
	lists, heads := counts.take()
	if time.Since(start) >= ttl {
		t.Skipf("the machine took %s, past the TTL", time.Since(start))
	}
	if lists != 0 || heads != 0 {
		t.Fatalf("within the TTL, a second ls and lookups of the directory's names sent %d LIST and %d HEAD; want none", lists, heads)
	}

	time.Sleep(time.Until(start.Add(ttl + 200*time.Millisecond)))
	if b, err := os.ReadFile(filepath.Join(dir, "f03")); err != nil || string(b) != "3" {
		t.Fatalf("f03 after the TTL: %q, %v", b, err)
	}
	if _, heads := counts.take(); heads == 0 {
		t.Fatal("an open after the TTL sent no HEAD")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "late")); err != nil || string(b) != "late" {
		t.Fatalf("a name added after the listing, after the TTL: %q, %v", b, err)
	}
	if n := ls(); n != 32 {
		t.Fatalf("ls after the TTL listed %d, want 32", n)
	}
	if lists, _ := counts.take(); lists == 0 {
		t.Fatal("an ls after the TTL sent no LIST")
	}
}

// Opens by name in a directory never listed, by 8 workers, do not send a
// HEAD and a LIST each: the lookups that keep missing list the directory
// once in the background and answer from that listing, a name not listed
// not found (vfs's TestLookupsThatKeepMissingListTheDirectory: a directory
// still wins over a file of its name).
func TestLookupsInAnUnlistedDirectoryListItOnce(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const n = 300
	sums := make([]string, n)
	for i := range n {
		sums[i] = srv.PutRandomObject(t, "data", fmt.Sprintf("dir/s%03d", i), int64(4<<10+i*200), int64(i))
	}
	srv.PutObject(t, "data", "dir/sub/inner", []byte("inner"))
	counts := &countingStore{}
	mp, _ := mountOf(t, srv, "data", nil, mounttest.WrapStore(func(s objstore.Store) objstore.Store { counts.Store = s; return counts }))
	dir := filepath.Join(mp, "dir")
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	counts.take()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if got := fileSHA256(t, filepath.Join(dir, fmt.Sprintf("s%03d", i)), 64<<10); got != sums[i] {
					t.Errorf("s%03d: sha256 %s, want %s", i, got, sums[i])
				}
			}
		}()
	}
	wg.Wait()
	if st, err := os.Stat(filepath.Join(dir, "sub")); err != nil || !st.IsDir() {
		t.Fatalf("sub: %v, %v; want the directory", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v, want ENOENT", err)
	}
	full, lists, heads := counts.takeFull()
	t.Logf("%d opens: %d HEAD, %d LIST (%d of the whole directory)", n, heads, lists, full)
	if heads > 4 || lists > 4+3 || full != 1 {
		t.Fatalf("%d opens by name sent %d HEAD and %d LIST (%d of the whole directory); want at most 4 HEAD, 7 LIST, one listing", n, heads, lists, full)
	}
}

// A directory with more names than the listings cache holds is listed once
// in the background, found too large, and not listed again within
// --meta-ttl: its names are looked up one by one, and after the TTL the
// lookups that keep missing try one listing again.
func TestLookupsInADirectoryOverTheBoundListItOncePerTTL(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const n = 120
	for i := range n {
		srv.PutObject(t, "data", fmt.Sprintf("dir/f%03d", i), []byte(fmt.Sprint(i)))
	}
	const ttl = 4 * time.Second
	counts := &countingStore{}
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Core.MetaTTL = ttl
		c.Core.MetaEntries = 50 // the listings' bound too
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { counts.Store = s; return counts }))
	dir := filepath.Join(mp, "dir")
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	counts.take()
	for round := range 2 {
		start := time.Now()
		for i := range n {
			if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%03d", i))); err != nil || string(b) != fmt.Sprint(i) {
				t.Fatalf("f%03d: %q, %v", i, b, err)
			}
		}
		full, lists, heads := counts.takeFull()
		if took := time.Since(start); took >= ttl {
			t.Skipf("the machine took %s, past the TTL", took)
		}
		t.Logf("round %d: %d opens: %d HEAD, %d LIST (%d of the whole directory)", round, n, heads, lists, full)
		if full != 1 {
			t.Fatalf("round %d: %d whole listings of a directory over the bound, want 1 per TTL", round, full)
		}
		if heads < n-4 {
			t.Fatalf("round %d: %d HEAD for %d names of a directory over the bound, want per-name lookups", round, heads, n)
		}
		time.Sleep(time.Until(start.Add(ttl + 300*time.Millisecond)))
	}
}

// openListed lists dir under mp and then opens name in it, closed when the
// test ends: a cached listing must not hand an old version back to the open.
func openListed(t *testing.T, mp, dir, name string) (string, *os.File) {
	t.Helper()
	if _, err := os.ReadDir(filepath.Join(mp, dir)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mp, dir, name)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return path, f
}

// Keys whose names are not valid UTF-8 (here files put straight into the
// server's directory) cannot be asked for: the S3 client refuses such a key
// in every request. A lookup of the name, or of a name under such a prefix,
// is ENOENT, not EIO; ls of the directory shows the other names and does
// not fail; the keys listed are skipped, counted and logged with a reason.
func TestKeysNotUTF8AreNotServed(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "ok.txt", []byte("fine"))
	srv.PutObject(t, "data", "sub/inner", []byte("inner"))
	bucketDir := filepath.Join(srv.Dir, "data")
	if err := os.WriteFile(filepath.Join(bucketDir, "bad\xff.txt"), []byte("bad"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(bucketDir, "dir\xfe"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bucketDir, "dir\xfe", "inner"), []byte("inner"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})

	// By name first, before any listing could answer for them.
	for _, name := range []string{"bad\xff.txt", "dir\xfe", "dir\xfe/inner"} {
		if _, err := os.Stat(filepath.Join(mp, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %q: %v, want ENOENT", name, err)
		}
	}
	if _, err := os.ReadDir(filepath.Join(mp, "dir\xfe")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ls %q: %v, want ENOENT", "dir\xfe", err)
	}

	ents, err := os.ReadDir(mp)
	if err != nil {
		t.Fatalf("ls of the bucket: %v", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"ok.txt", "sub"}) {
		t.Fatalf("ls listed %q, want [ok.txt sub]", names)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "ok.txt")); err != nil || string(b) != "fine" {
		t.Fatalf("ok.txt: %q, %v", b, err)
	}
	// versitygw lists such a name with U+FFFD in place of the bytes (a
	// server that URL-encodes its listings gives the bytes back, skipped as
	// invalid_utf8: vfs's TestKeysNotUTF8AreSkipped).
	skipped := metricAt(t, d, "skipped_keys_total", "replacement_char") + metricAt(t, d, "skipped_keys_total", "invalid_utf8")
	if skipped != 2 {
		t.Errorf("skipped keys {replacement_char, invalid_utf8} = %v, want 2", skipped)
	}
	for _, key := range []string{"bad", "dir"} {
		if !strings.Contains(logs.String(), `msg="key not shown in the mount" bucket=data key="`+key) {
			t.Errorf("no log line for the skipped key %s... in:\n%s", key, logs.String())
		}
	}
}
