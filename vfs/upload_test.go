package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// memUploader is the write side of memStore: completed uploads become its
// objects. gate, when set, holds every part until the test lets it go.
type memUploader struct {
	store *memStore

	mu          sync.Mutex
	next        int
	uploads     map[string]map[int][]byte // upload ID: parts by number
	keys        map[string]string         // upload ID: bucket/key
	aborted     []string
	inFlight    int
	maxInFlight int
	gate        chan struct{}
}

func newMemUploader(s *memStore) *memUploader {
	return &memUploader{store: s, uploads: map[string]map[int][]byte{}, keys: map[string]string{}}
}

func join(data [][]byte) []byte { return bytes.Join(data, nil) }

func (m *memUploader) PutObject(ctx context.Context, bucket, key string, data [][]byte) (objstore.Version, error) {
	b := join(data)
	m.store.put(bucket, key, b, fmt.Sprintf("put-%d", len(b)))
	return objstore.Version{ETag: fmt.Sprintf("put-%d", len(b)), Size: int64(len(b))}, nil
}

func (m *memUploader) CreateMultipart(ctx context.Context, bucket, key string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	id := fmt.Sprintf("up%d", m.next)
	m.uploads[id] = map[int][]byte{}
	m.keys[id] = bucket + "/" + key
	return id, nil
}

func (m *memUploader) UploadPart(ctx context.Context, bucket, key, id string, number int, data [][]byte) (objstore.CompletedPart, error) {
	m.mu.Lock()
	m.inFlight++
	m.maxInFlight = max(m.maxInFlight, m.inFlight)
	gate := m.gate
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inFlight--
		m.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return objstore.CompletedPart{}, ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, ok := m.uploads[id]
	if !ok {
		return objstore.CompletedPart{}, objstore.ErrNoUpload
	}
	parts[number] = join(data)
	return objstore.CompletedPart{Number: number, ETag: fmt.Sprint("p", number)}, nil
}

func (m *memUploader) CompleteMultipart(ctx context.Context, bucket, key, id string, parts []objstore.CompletedPart) (objstore.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	held, ok := m.uploads[id]
	if !ok {
		return objstore.Version{}, objstore.ErrNoUpload
	}
	var all []byte
	for i, p := range parts {
		if p.Number != i+1 {
			return objstore.Version{}, fmt.Errorf("part %d at %d", p.Number, i)
		}
		all = append(all, held[p.Number]...)
	}
	delete(m.uploads, id)
	m.store.put(bucket, key, all, "mp-"+id)
	return objstore.Version{ETag: "mp-" + id, Size: int64(len(all))}, nil
}

func (m *memUploader) AbortMultipart(ctx context.Context, bucket, key, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.uploads[id]; !ok {
		return objstore.ErrNoUpload
	}
	delete(m.uploads, id)
	m.aborted = append(m.aborted, id)
	return nil
}

func (m *memUploader) ListMultipart(ctx context.Context, bucket, prefix string) ([]objstore.PendingUpload, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []objstore.PendingUpload
	for id, k := range m.keys {
		if _, open := m.uploads[id]; open {
			out = append(out, objstore.PendingUpload{Key: k, UploadID: id})
		}
	}
	return out, nil
}

func (m *memUploader) open() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.uploads)
}

func (m *memUploader) CopyObject(ctx context.Context, bucket, src, dst string) (objstore.Version, error) {
	m.store.mu.Lock()
	b, ok := m.store.objects[bucket+"/"+src]
	m.store.mu.Unlock()
	if !ok {
		return objstore.Version{}, objstore.ErrNotFound
	}
	m.store.put(bucket, dst, b, "copy")
	return objstore.Version{ETag: "copy", Size: int64(len(b))}, nil
}

func (m *memUploader) UploadPartCopy(ctx context.Context, bucket, src, srcETag, dst, id string, number int, off, length int64) (objstore.CompletedPart, error) {
	m.store.mu.Lock()
	b, ok := m.store.objects[bucket+"/"+src]
	etag := m.store.etags[bucket+"/"+src]
	m.store.mu.Unlock()
	switch {
	case !ok:
		return objstore.CompletedPart{}, objstore.ErrNotFound
	case srcETag != "" && srcETag != etag:
		return objstore.CompletedPart{}, objstore.ErrChanged
	case off+length > int64(len(b)):
		return objstore.CompletedPart{}, fmt.Errorf("range %d+%d of %d bytes", off, length, len(b))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, ok := m.uploads[id]
	if !ok {
		return objstore.CompletedPart{}, objstore.ErrNoUpload
	}
	parts[number] = b[off : off+length]
	return objstore.CompletedPart{Number: number, ETag: fmt.Sprint("c", number)}, nil
}

func (m *memUploader) DeleteObject(ctx context.Context, bucket, key string) error {
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	delete(m.store.objects, bucket+"/"+key)
	return nil
}

const testPart = objstore.MinPartSize // 5 MiB, five 1 MiB blocks

// writableFS is a core over store with writes through up.
func writableFS(t *testing.T, store *memStore, up objstore.Uploader, tune func(*Config)) *FS {
	t.Helper()
	cfg := testConfig(Config{Bucket: "b"})
	cfg.Retries = 2
	cfg.Writes = WriteConfig{Allow: true, PartSize: testPart, PartsInFlight: 2, CopyLimit: objstore.MaxCopyObject, CopyPartSize: testPart}
	if tune != nil {
		tune(&cfg)
	}
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	f, err := New(store, cfg, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.EnableWrites(up); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.CloseWrites)
	return f
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>13)
	}
	return b
}

func errnoOf(err error) syscall.Errno {
	code, _ := errno.Of(err)
	return code
}

// A writer that has filled PartsInFlight parts and one more waits for a
// part to be sent: memory stays bounded, and the object is whole at the end.
func TestUploadBackPressureAndBoundedParts(t *testing.T) {
	store := newMemStore()
	up := newMemUploader(store)
	up.gate = make(chan struct{})
	f := writableFS(t, store, up, nil)
	u, err := f.Create(context.Background(), f.Root(), "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(6*testPart + 12345)
	done := make(chan error, 1)
	go func() {
		for off := 0; off < len(data); off += 1 << 20 {
			if _, err := u.Write(context.Background(), int64(off), data[off:min(off+1<<20, len(data))]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// Two parts held at the gate and a third full: the writer waits.
	for u.Size() < 3*testPart {
		select {
		case err := <-done:
			t.Fatalf("the writer finished (%v) with every part held", err)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the writer went past three parts (%v) with two held", err)
	case <-time.After(50 * time.Millisecond):
	}
	if got := u.Size(); got != 3*testPart {
		t.Fatalf("%d bytes taken with two parts held, want %d", got, 3*testPart)
	}
	if used := f.Blocks().Budget().Used(); used > 3*testPart {
		t.Fatalf("%d bytes of block memory held, want at most three parts", used)
	}
	close(up.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	got, ok := store.objects["b/ckpt"]
	if !ok || !bytes.Equal(got, data) {
		t.Fatalf("the object is %d bytes (present %v), wrote %d", len(got), ok, len(data))
	}
	if up.maxInFlight != 2 {
		t.Errorf("%d parts in flight at most, want 2", up.maxInFlight)
	}
	if used := f.Blocks().Budget().Used(); used != 0 {
		t.Errorf("%d bytes of block memory held after the upload", used)
	}
	if e, err := f.Lookup(context.Background(), f.Root(), "ckpt"); err != nil || e.Version.Size != int64(len(data)) {
		t.Errorf("lookup after the upload: %+v, %v", e, err)
	}
}

func TestUploadSmallFileIsOnePut(t *testing.T) {
	store := newMemStore()
	faults := &faultstore.Uploads{Inner: newMemUploader(store)}
	f := writableFS(t, store, faults, nil)
	u, err := f.Create(context.Background(), f.Root(), "small")
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(testPart - 1)
	if _, err := u.Write(context.Background(), 0, data); err != nil {
		t.Fatal(err)
	}
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(store.objects["b/small"], data) {
		t.Fatal("the object is not what was written")
	}
	if faults.Calls("put") != 1 || faults.Calls("create") != 0 {
		t.Errorf("%d PUTs and %d multipart uploads, want one PUT", faults.Calls("put"), faults.Calls("create"))
	}
}

// A part that keeps failing fails the close with EIO and aborts the upload;
// one that fails less often than the retries is sent again and succeeds.
func TestUploadPartFailures(t *testing.T) {
	transient := &faultstore.TransientError{Status: 500, Code: "InternalError"}
	for _, tc := range []struct {
		name     string
		failures int // of part 2
		wantErr  bool
	}{
		{"retried", 2, false},
		{"exhausted", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newMemStore()
			mem := newMemUploader(store)
			faults := &faultstore.Uploads{Inner: mem, Fail: func(op string, part, attempt int) error {
				if op == "part" && part == 2 && attempt <= tc.failures {
					return transient
				}
				return nil
			}}
			f := writableFS(t, store, faults, nil) // 2 retries
			u, err := f.Create(context.Background(), f.Root(), "f")
			if err != nil {
				t.Fatal(err)
			}
			data := pattern(3 * testPart)
			if _, err := u.Write(context.Background(), 0, data); err != nil {
				t.Fatal(err)
			}
			err = u.Finish()
			if !tc.wantErr {
				if err != nil || !bytes.Equal(store.objects["b/f"], data) {
					t.Fatalf("finish: %v", err)
				}
				return
			}
			if errnoOf(err) != syscall.EIO {
				t.Fatalf("finish: %v, want EIO", err)
			}
			if errnoOf(u.Finish()) != syscall.EIO {
				t.Error("a second finish did not answer the same")
			}
			if _, ok := store.objects["b/f"]; ok {
				t.Error("a failed upload left an object")
			}
			if len(mem.aborted) != 1 || mem.open() != 0 {
				t.Errorf("aborted %v, %d open, want the one aborted", mem.aborted, mem.open())
			}
			if _, err := u.Write(context.Background(), int64(len(data)), []byte("x")); !errors.Is(err, ErrUploaded) {
				t.Errorf("write after the failed close: %v", err)
			}
			if _, err := f.Lookup(context.Background(), f.Root(), "f"); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("lookup after the failed upload: %v, want not found", err)
			}
		})
	}
}

func TestUploadRefusesWritesNotAtTheEnd(t *testing.T) {
	store := newMemStore()
	f := writableFS(t, store, newMemUploader(store), nil)
	u, err := f.Create(context.Background(), f.Root(), "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(context.Background(), 0, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 2, 4} {
		if _, err := u.Write(context.Background(), off, []byte("x")); errnoOf(err) != syscall.EINVAL {
			t.Errorf("write at %d after 3 bytes: %v, want EINVAL", off, err)
		}
	}
	if _, err := f.Create(context.Background(), f.Root(), "f"); errnoOf(err) != syscall.EBUSY {
		t.Errorf("second create while written: %v, want EBUSY", err)
	}
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	if string(store.objects["b/f"]) != "abc" {
		t.Fatalf("object %q", store.objects["b/f"])
	}
	e, _ := f.Lookup(context.Background(), f.Root(), "f")
	if _, err := f.OpenWrite(e, false); errnoOf(err) != syscall.EPERM {
		t.Errorf("open without O_TRUNC: %v, want EPERM", err)
	}
	if _, err := f.OpenWrite(e, true); errnoOf(err) != syscall.EPERM {
		t.Errorf("overwrite without AllowOverwrite: %v, want EPERM", err)
	}
	if _, err := f.Create(context.Background(), f.Root(), "f"); errnoOf(err) != syscall.EEXIST {
		t.Errorf("create of an existing object: %v, want EEXIST", err)
	}
}

// A daemon that stops with an upload open leaves it in its journal; the
// next start aborts it.
func TestJournalAbortsUploadsAStoppedDaemonLeft(t *testing.T) {
	dir := t.TempDir()
	store := newMemStore()
	mem := newMemUploader(store)
	tune := func(c *Config) { c.Writes.Journal = dir }
	first := writableFS(t, store, mem, tune)
	u, err := first.Create(context.Background(), first.Root(), "left")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(context.Background(), 0, pattern(2*testPart)); err != nil {
		t.Fatal(err)
	}
	done, err := first.Create(context.Background(), first.Root(), "done")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Write(context.Background(), 0, pattern(2*testPart)); err != nil {
		t.Fatal(err)
	}
	if err := done.Finish(); err != nil {
		t.Fatal(err)
	}
	// A second daemon while the first runs aborts nothing of the first's.
	second := writableFS(t, store, mem, tune)
	if n, err := second.AbortLeftUploads(context.Background()); n != 0 || err != nil {
		t.Fatalf("aborted %d (%v) of a running daemon's uploads", n, err)
	}
	if mem.open() != 1 {
		t.Fatalf("%d uploads open, want the one being written", mem.open())
	}
	first.CloseWrites() // the daemon stops, the upload still open
	// The server refuses the first abort, as one still taking in the
	// stopped daemon's last part does: the start sends it again.
	flaky := &faultstore.Uploads{Inner: mem, Fail: func(op string, _, attempt int) error {
		if op == "abort" && attempt == 1 {
			return errors.New("InternalError: directory not empty")
		}
		return nil
	}}
	third := writableFS(t, store, flaky, tune)
	n, err := third.AbortLeftUploads(context.Background())
	if n != 1 || err != nil {
		t.Fatalf("aborted %d (%v), want the one left", n, err)
	}
	if mem.open() != 0 || len(mem.aborted) != 1 || flaky.Calls("abort") != 2 {
		t.Fatalf("%d uploads open, aborted %v in %d calls", mem.open(), mem.aborted, flaky.Calls("abort"))
	}
	if _, ok := store.objects["b/done"]; !ok {
		t.Fatal("the completed upload's object is gone")
	}
}

// A size set before the bytes are written (safetensors' save_file) is the
// file's size: the writes fill it in order and zeros the rest; a size
// below what was written is refused.
func TestUploadTruncateSetsTheSizeAhead(t *testing.T) {
	store := newMemStore()
	f := writableFS(t, store, newMemUploader(store), nil)
	u, err := f.Create(context.Background(), f.Root(), "st")
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Truncate(10); err != nil {
		t.Fatal(err)
	}
	if u.Size() != 10 {
		t.Errorf("size %d after truncate to 10", u.Size())
	}
	if _, err := u.Write(context.Background(), 0, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := u.Truncate(2); errnoOf(err) != syscall.EINVAL {
		t.Errorf("truncate below what was written: %v, want EINVAL", err)
	}
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	if got := store.objects["b/st"]; string(got) != "abc\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("object %q", got)
	}
}

// A file renamed while it is written (safetensors renames its temporary
// file before closing it) ends as the object under its new name, whether
// it is one PUT or a multipart upload; the old name holds nothing.
func TestUploadRenamedWhileWritten(t *testing.T) {
	for _, size := range []int{100, 2*testPart + 7} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := newMemStore()
			mem := newMemUploader(store)
			f := writableFS(t, store, mem, nil)
			u, err := f.Create(context.Background(), f.Root(), ".tmp1")
			if err != nil {
				t.Fatal(err)
			}
			data := pattern(size)
			if _, err := u.Write(context.Background(), 0, data); err != nil {
				t.Fatal(err)
			}
			src, err := f.Lookup(context.Background(), f.Root(), ".tmp1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Rename(context.Background(), src, f.Root(), "model.safetensors", false); err != nil {
				t.Fatalf("rename while written: %v", err)
			}
			if _, err := f.Lookup(context.Background(), f.Root(), ".tmp1"); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("old name after the rename: %v", err)
			}
			if e, err := f.Lookup(context.Background(), f.Root(), "model.safetensors"); err != nil || e.Dir {
				t.Errorf("new name while written: %+v, %v", e, err)
			}
			if err := u.Finish(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(store.objects["b/model.safetensors"], data) {
				t.Fatal("the new name does not hold the bytes")
			}
			if _, ok := store.objects["b/.tmp1"]; ok {
				t.Error("the old name holds an object")
			}
			if e, err := f.Lookup(context.Background(), f.Root(), "model.safetensors"); err != nil || e.Version.Size != int64(size) {
				t.Errorf("lookup after close: %+v, %v", e, err)
			}
		})
	}
}

// Writers that together want more memory than the limit all finish: each
// takes a whole part's memory before filling it, so none waits holding
// part of a part that another's wait keeps it from completing.
func TestUploadManyWritersInLittleMemory(t *testing.T) {
	store := newMemStore()
	f := writableFS(t, store, newMemUploader(store), func(c *Config) {
		c.MemoryLimit, c.CacheSize = 32<<20, 0 // six parts of 5 MiB
		c.Writes.PartsInFlight = 1
	})
	const writers = 8
	data := pattern(3*testPart + 1)
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			u, err := f.Create(context.Background(), f.Root(), fmt.Sprint("w", i))
			if err != nil {
				errs <- err
				return
			}
			for off := 0; off < len(data); off += 1 << 20 {
				if _, err := u.Write(context.Background(), int64(off), data[off:min(off+1<<20, len(data))]); err != nil {
					errs <- err
					return
				}
			}
			errs <- u.Finish()
		}()
	}
	for range writers {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("writers waiting for memory no one frees")
		}
	}
	for i := range writers {
		if !bytes.Equal(store.objects[fmt.Sprint("b/w", i)], data) {
			t.Errorf("w%d is not what was written", i)
		}
	}
}

// Parts a sender carries itself take their numbers in order with the
// upload's own: after the part being filled, before the bytes written
// after them. A part sent through SendHTTP goes as an own part does.
func TestUploadWritePartInOrderWithOwnParts(t *testing.T) {
	store := newMemStore()
	mem := newMemUploader(store)
	f := writableFS(t, store, mem, nil)
	u, err := f.Create(context.Background(), f.Root(), "mixed")
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(4*testPart + 123)
	ctx := context.Background()
	if _, err := u.Write(ctx, 0, data[:testPart]); err != nil { // part 1, full, not sent yet
		t.Fatal(err)
	}
	if _, err := u.WritePart(ctx, 1, WriteGPURDMA, WriteGPUHTTP, nil); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("a part not at the end: %v, want EINVAL", err)
	}
	var dones []<-chan error
	// Part 2 carried by its sender straight to the store, part 3 through SendHTTP.
	done, err := u.WritePart(ctx, testPart, WriteGPURDMA, WriteGPUHTTP, func(ctx context.Context, p *RemotePart) (objstore.CompletedPart, error) {
		if p.Number != 2 || p.Size != testPart {
			return objstore.CompletedPart{}, fmt.Errorf("part %d of %d bytes, want part 2", p.Number, p.Size)
		}
		return mem.UploadPart(ctx, p.Bucket, p.Key, p.UploadID, p.Number, [][]byte{data[testPart : 2*testPart]})
	})
	if err != nil {
		t.Fatal(err)
	}
	dones = append(dones, done)
	done, err = u.WritePart(ctx, 2*testPart, WriteGPURDMA, WriteGPUHTTP, func(ctx context.Context, p *RemotePart) (objstore.CompletedPart, error) {
		return p.SendHTTP(ctx, func(bufs [][]byte) error {
			src := data[2*testPart : 3*testPart]
			for _, b := range bufs {
				src = src[copy(b, src):]
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	dones = append(dones, done)
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if u.Size() != 3*testPart {
		t.Fatalf("size %d after two whole parts, want %d", u.Size(), 3*testPart)
	}
	if _, err := u.Write(ctx, 3*testPart, data[3*testPart:]); err != nil { // parts 4 and 5
		t.Fatal(err)
	}
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(store.objects["b/mixed"], data) {
		t.Fatal("the object is not what was written, in order")
	}
	if got := counterValue(t, f.m, "write_bytes_total", WriteGPURDMA); got != testPart {
		t.Errorf("gpu_rdma bytes %v, want one part", got)
	}
	if got := counterValue(t, f.m, "write_bytes_total", WriteGPUHTTP); got != testPart {
		t.Errorf("gpu_http bytes %v, want the part sent through SendHTTP", got)
	}
}

// A sender that fails fails the upload: its channel says why, later
// writes and the close answer EIO, and the upload is aborted.
func TestUploadWritePartFailureAbortsTheUpload(t *testing.T) {
	store := newMemStore()
	mem := newMemUploader(store)
	f := writableFS(t, store, mem, nil)
	u, err := f.Create(context.Background(), f.Root(), "failed")
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("declined")
	done, err := u.WritePart(context.Background(), 0, WriteGPURDMA, WriteGPUHTTP, func(context.Context, *RemotePart) (objstore.CompletedPart, error) {
		return objstore.CompletedPart{}, refused
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, refused) {
		t.Fatalf("part: %v, want the sender's error", err)
	}
	if _, err := u.Write(context.Background(), testPart, []byte("x")); errnoOf(err) != syscall.EIO {
		t.Errorf("write after the failed part: %v, want EIO", err)
	}
	if err := u.Finish(); errnoOf(err) != syscall.EIO {
		t.Fatalf("finish: %v, want EIO", err)
	}
	if _, ok := store.objects["b/failed"]; ok || len(mem.aborted) != 1 || mem.open() != 0 {
		t.Errorf("object left %v, aborted %v, %d open", ok, mem.aborted, mem.open())
	}
}

// A rename of an object past CopyLimit copies it in parts: a part that
// fails less often than the retries is sent again; one that keeps failing
// aborts the copy (the journal no longer names it), and the rename answers
// EIO with the source whole and no destination.
func TestRenameCopiesInParts(t *testing.T) {
	transient := &faultstore.TransientError{Status: 500, Code: "InternalError"}
	for _, tc := range []struct {
		name     string
		failures int // of copy part 3
		wantErr  bool
	}{
		{"retried", 2, false},
		{"exhausted", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newMemStore()
			mem := newMemUploader(store)
			faults := &faultstore.Uploads{Inner: mem, Fail: func(op string, part, attempt int) error {
				if op == "copy_part" && part == 3 && attempt <= tc.failures {
					return transient
				}
				return nil
			}}
			journal := t.TempDir()
			f := writableFS(t, store, faults, func(c *Config) { // 2 retries
				c.Writes.CopyLimit = 2 * testPart
				c.Writes.Journal = journal
			})
			data := pattern(4*testPart + 99)
			store.put("b", "src", data, "v1")
			src, err := f.Lookup(context.Background(), f.Root(), "src")
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Rename(context.Background(), src, f.Root(), "dst", false)
			if faults.Calls("copy") != 0 || faults.Calls("create") != 1 {
				t.Errorf("%d CopyObjects and %d multipart uploads, want one copy in parts", faults.Calls("copy"), faults.Calls("create"))
			}
			if mem.open() != 0 {
				t.Errorf("%d multipart uploads left open", mem.open())
			}
			if n := len(f.w.journal.open); n != 0 {
				t.Errorf("the journal names %d uploads after the rename", n)
			}
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("rename: %v", err)
				}
				if !bytes.Equal(store.objects["b/dst"], data) {
					t.Fatal("the new name does not hold the bytes")
				}
				if _, ok := store.objects["b/src"]; ok {
					t.Error("the old name holds an object")
				}
				return
			}
			if errnoOf(err) != syscall.EIO {
				t.Fatalf("rename: %v, want EIO", err)
			}
			if _, ok := store.objects["b/dst"]; ok {
				t.Error("a failed copy left the destination")
			}
			if !bytes.Equal(store.objects["b/src"], data) {
				t.Error("the source is not whole after the failed copy")
			}
			if len(mem.aborted) != 1 {
				t.Errorf("aborted %v, want the copy", mem.aborted)
			}
		})
	}
}

func TestCopyPartSizeStaysWithinMaxParts(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct{ size, part, want int64 }{
		{8 * gib, gib, gib},
		{5 * 1024 * gib, objstore.MinPartSize, (5*1024*gib + objstore.MaxParts - 1) / objstore.MaxParts},
	} {
		got := copyPartSize(tc.size, tc.part)
		if got != tc.want || (tc.size+got-1)/got > objstore.MaxParts {
			t.Errorf("copyPartSize(%d, %d) = %d, want %d", tc.size, tc.part, got, tc.want)
		}
	}
}
