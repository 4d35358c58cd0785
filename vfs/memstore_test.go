package vfs

import (
	"bytes"
	"context"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// memStore is an in-memory stand-in for S3, used only by this package's unit
// tests for keys a real server's filesystem cannot hold (empty segments,
// names over 255 bytes) and for exact page boundaries. The integration tests
// run against versitygw.
type memStore struct {
	mu       sync.Mutex
	objects  map[string][]byte // "bucket/key"
	etags    map[string]string
	pageSize int
	gets     []string     // "key@off+n", in order
	served   atomic.Int64 // bytes read from GET bodies
	// beforePage, when set, runs before each page is served (to change the
	// listing between pages).
	beforePage func(page int)
	pages      int
}

func newMemStore() *memStore {
	return &memStore{objects: map[string][]byte{}, etags: map[string]string{}, pageSize: 1000}
}

func (m *memStore) put(bucket, key string, data []byte, etag string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[bucket+"/"+key] = data
	m.etags[bucket+"/"+key] = etag
}

func (m *memStore) ListBuckets(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := map[string]bool{}
	for k := range m.objects {
		b, _, _ := strings.Cut(k, "/")
		set[b] = true
	}
	var out []string
	for b := range set {
		out = append(out, b)
	}
	sort.Strings(out)
	return out, nil
}

func (m *memStore) CheckBucket(ctx context.Context, bucket string) error { return nil }

func (m *memStore) Stat(ctx context.Context, bucket, key string) (objstore.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.objects[bucket+"/"+key]
	if !ok {
		return objstore.Object{}, objstore.ErrNotFound
	}
	return objstore.Object{Key: key, Version: objstore.Version{ETag: m.etags[bucket+"/"+key], Size: int64(len(d))}}, nil
}

// List implements a delimited ListObjectsV2 with the continuation token
// being the last key returned.
func (m *memStore) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (objstore.Page, error) {
	m.mu.Lock()
	if m.beforePage != nil {
		hook := m.beforePage
		page := m.pages
		m.mu.Unlock()
		hook(page)
		m.mu.Lock()
	}
	m.pages++
	defer m.mu.Unlock()
	if maxKeys <= 0 || maxKeys > m.pageSize {
		maxKeys = m.pageSize
	}
	var keys []string
	for k := range m.objects {
		b, key, _ := strings.Cut(k, "/")
		if b == bucket && strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	var page objstore.Page
	seenPrefix := map[string]bool{}
	n := 0
	for _, k := range keys {
		if k <= cont {
			continue
		}
		rest := k[len(prefix):]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			p := prefix + rest[:i+1]
			if seenPrefix[p] || p <= cont {
				continue
			}
			if n == maxKeys {
				page.Next = cont
				return page, nil
			}
			seenPrefix[p] = true
			page.Prefixes = append(page.Prefixes, p)
			n++
			cont = p // everything under p is covered by the prefix
			continue
		}
		if n == maxKeys {
			page.Next = cont
			return page, nil
		}
		page.Objects = append(page.Objects, objstore.Object{Key: k, Version: objstore.Version{ETag: m.etags[bucket+"/"+k], Size: int64(len(m.objects[bucket+"/"+k]))}})
		cont = k
		n++
	}
	return page, nil
}

func (m *memStore) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.objects[bucket+"/"+key]
	if !ok {
		return nil, objstore.ErrNotFound
	}
	if m.etags[bucket+"/"+key] != v.ETag {
		return nil, objstore.ErrChanged
	}
	m.gets = append(m.gets, key+"@"+strconv.FormatInt(off, 10)+"+"+strconv.FormatInt(n, 10))
	return io.NopCloser(&countingReader{r: bytes.NewReader(d[off : off+n]), n: &m.served}), nil
}

// countingReader adds what is read through it to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// parseGet reads back a GET log entry, "key@off+n".
func parseGet(t *testing.T, g string) (off, n int64) {
	t.Helper()
	_, rng, _ := strings.Cut(g, "@")
	at, length, _ := strings.Cut(rng, "+")
	off, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(length, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("GET log entry %q", g)
	}
	return off, n
}
