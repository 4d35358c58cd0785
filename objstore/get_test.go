package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// scriptedStore answers GetRange from data, breaking the i-th request as
// fail(i) says: an error before the reply, or a body cut after cut bytes.
type scriptedStore struct {
	data []byte
	fail func(i int) (err error, cut int64)

	mu   sync.Mutex
	offs []int64 // each request's offset
}

func (s *scriptedStore) ListBuckets(context.Context) ([]string, error) { return nil, nil }
func (s *scriptedStore) CheckBucket(context.Context, string) error     { return nil }
func (s *scriptedStore) Stat(context.Context, string, string) (Object, error) {
	return Object{}, nil
}
func (s *scriptedStore) List(context.Context, string, string, string, int) (Page, error) {
	return Page{}, nil
}
func (s *scriptedStore) GetRange(_ context.Context, _, _ string, off, n int64, _ Version) (io.ReadCloser, error) {
	s.mu.Lock()
	i := len(s.offs)
	s.offs = append(s.offs, off)
	s.mu.Unlock()
	err, cut := s.fail(i)
	if err != nil {
		return nil, err
	}
	r := io.Reader(bytes.NewReader(s.data[off : off+n]))
	if cut >= 0 {
		r = io.MultiReader(io.LimitReader(r, cut), errReader{io.ErrUnexpectedEOF})
	}
	return io.NopCloser(r), nil
}

func (s *scriptedStore) requests() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.offs...)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// A Fetch whose body breaks asks again for the bytes not yet delivered,
// and only those: the reader gets every byte once, in order.
func TestFetchResumesFromTheBytesDelivered(t *testing.T) {
	data := testenv.RandomBytes(5, 0, 100_000)
	s := &scriptedStore{data: data, fail: func(i int) (error, int64) {
		switch i {
		case 0:
			return nil, 30_000 // broken mid-body
		case 1:
			return errors.New("503 SlowDown"), 0
		}
		return nil, -1
	}}
	var retries atomic.Int32
	g := &Getter{Store: s, ReadTimeout: time.Minute, Retries: 3, OnRetry: func() { retries.Add(1) }}
	var got bytes.Buffer
	err := g.Fetch(context.Background(), Range{Bucket: "b", Key: "k", Off: 1000, N: 90_000}, false, nil,
		func(b *Body, pos int64) (int64, error) {
			if pos != 1000+int64(got.Len()) {
				t.Errorf("attempt from %d, %d bytes delivered already", pos, got.Len())
			}
			var k int64
			p := make([]byte, 10_000)
			for b.Left() > 0 {
				q := p[:min(int64(len(p)), b.Left())]
				if err := b.ReadFull(q); err != nil {
					return k, err
				}
				got.Write(q)
				k += int64(len(q))
			}
			return k, nil
		})
	if err != nil || !bytes.Equal(got.Bytes(), data[1000:91_000]) {
		t.Fatalf("%v; %d bytes, or they differ", err, got.Len())
	}
	if offs := s.requests(); fmt.Sprint(offs) != "[1000 31000 31000]" || retries.Load() != 2 {
		t.Errorf("requests from %v, %d retries; want [1000 31000 31000] and 2", offs, retries.Load())
	}
}

// The pause before a retry ends with the caller's context: a reader that
// gave up is not held for the backoff, nor sent another request.
func TestFetchBackoffEndsWithTheContext(t *testing.T) {
	s := &scriptedStore{data: make([]byte, 10), fail: func(int) (error, int64) { return errors.New("500 InternalError"), 0 }}
	g := &Getter{Store: s, ReadTimeout: time.Minute, Retries: 10}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel) // within the second pause (200 ms)
	err := g.Fetch(ctx, Range{Bucket: "b", Key: "k", N: 10}, false, nil, func(*Body, int64) (int64, error) {
		t.Fatal("a body was delivered")
		return 0, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want the caller's cancel", err)
	}
	if n := len(s.requests()); n > 2 {
		t.Errorf("%d requests sent, at most 2 before the cancel", n)
	}
}

// An object that changed ends the Fetch at once with ErrChanged, and
// OnChanged hears of it once: the one place a reader drops its entry.
func TestFetchReportsAChangedObjectOnce(t *testing.T) {
	s := &scriptedStore{data: make([]byte, 10), fail: func(int) (error, int64) {
		return fmt.Errorf("b/k: %w (PreconditionFailed)", ErrChanged), 0
	}}
	var changed []string
	g := &Getter{Store: s, ReadTimeout: time.Minute, Retries: 3,
		OnChanged: func(bucket, key string) { changed = append(changed, bucket+"/"+key) }}
	err := g.Fetch(context.Background(), Range{Bucket: "b", Key: "k", N: 10}, false, nil,
		func(*Body, int64) (int64, error) { return 0, nil })
	if !errors.Is(err, ErrChanged) || len(s.requests()) != 1 || fmt.Sprint(changed) != "[b/k]" {
		t.Fatalf("%v after %d requests, OnChanged told %v; want ErrChanged, 1, [b/k]", err, len(s.requests()), changed)
	}
}

// A GET is sent once per attempt: the S3 client's own retries would
// multiply the bound on a read (docs/operations.md), and the Getter
// retries already. Stat, which has no retries of ours, keeps the client's.
func TestMinioSendsEachGETOnce(t *testing.T) {
	var gets, heads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			heads.Add(1)
		} else {
			gets.Add(1)
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>slow down</Message></Error>`)
	}))
	defer srv.Close()
	m, err := NewMinio(Config{Endpoint: srv.URL, Region: testenv.Region, MaxRetries: 2,
		Credentials: credentials.NewStaticV4("a", "b", "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.GetRange(ctx, "bkt", "key", 0, 10, Version{ETag: "e", Size: 10}); err == nil {
		t.Fatal("GetRange of a 503 succeeded")
	}
	if _, err := m.GetRangeRDMA(ctx, "bkt", "key", 0, 10, Version{ETag: "e", Size: 10}, rdmaTestToken); err == nil {
		t.Fatal("GetRangeRDMA of a 503 succeeded")
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("%d GETs sent for two requests, want 2", n)
	}
	m.Stat(ctx, "bkt", "key")
	if n := heads.Load(); n != 2 {
		t.Errorf("%d HEADs sent for a stat with MaxRetries 2, want 2", n)
	}
}
