package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Every fault, sent through the real minio-go client against versitygw,
// must turn into an error (never into wrong or extra bytes), and a request
// without a fault must come through byte-exact.
func TestEveryFaultReachesMinioAsAnError(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 300 << 10
	srv.PutRandomObject(t, "data", "obj", size, 5)
	for _, k := range append([]Kind{None}, AllKinds()...) {
		t.Run(k.String(), func(t *testing.T) {
			rate := 1.0
			if k == None {
				rate = 0
			}
			p, err := Start(srv.Endpoint, Config{Seed: 1, Rate: rate, Kinds: []Kind{k}, StallFor: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			store, err := objstore.NewMinio(objstore.Config{
				Endpoint: p.URL, Region: srv.Region,
				Credentials: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
				MaxRetries:  1, // see each fault once
			})
			if err != nil {
				t.Fatal(err)
			}
			obj, err := store.Stat(context.Background(), "data", "obj") // a HEAD: not matched
			if err != nil {
				t.Fatalf("stat through the proxy: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			const off, n = 1000, 200 << 10
			got, err := get(ctx, store, off, n, obj.Version)
			if k == None {
				if err != nil || !bytes.Equal(got, testenv.RandomBytes(5, off, n)) {
					t.Fatalf("no fault: %d bytes, %v", len(got), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%v: the GET succeeded with %d bytes", k, len(got))
			}
			if !objstore.IsRetryable(err) {
				t.Errorf("%v: %v is not retryable", k, err)
			}
			if (k == StallHeaders || k == StallBody) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: %v, want the deadline", k, err)
			}
			if k == Status503 && !strings.Contains(err.Error(), "SlowDown") && !strings.Contains(err.Error(), "reduce your request rate") {
				t.Errorf("503: %v does not carry the SlowDown code", err)
			}
			c := p.Counts()
			if c[k.String()] != 1 || p.Injected() != 1 || c["requests"] != 2 || c["matched"] != 1 {
				t.Errorf("counts %s, want one %v among two requests", faultstore.SortedFaultCounts(c), k)
			}
		})
	}
}

func get(ctx context.Context, s objstore.Store, off, n int64, v objstore.Version) ([]byte, error) {
	body, err := s.GetRange(ctx, "data", "obj", off, n, v)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	p := make([]byte, n)
	if _, err := io.ReadFull(body, p); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := objstore.CheckEnd(body); err != nil {
		return nil, err
	}
	return p, nil
}

func TestScheduleIsSeededAndHonoursRate(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", 4096, 6)
	run := func(seed uint64) []string {
		p, err := Start(srv.Endpoint, Config{Seed: seed, Rate: 0.5, Kinds: []Kind{Status500, Status503, Truncate}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		store, _ := objstore.NewMinio(objstore.Config{Endpoint: p.URL, Region: srv.Region,
			Credentials: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), MaxRetries: 1})
		obj, err := store.Stat(context.Background(), "data", "obj")
		if err != nil {
			t.Fatal(err)
		}
		var outcomes []string
		for range 60 {
			_, err := get(context.Background(), store, 0, 4096, obj.Version)
			outcomes = append(outcomes, errKind(err))
		}
		c := p.Counts()
		if c["matched"] != 60 || p.Injected() < 15 || p.Injected() > 45 {
			t.Errorf("seed %d: %s", seed, faultstore.SortedFaultCounts(c))
		}
		return outcomes
	}
	a, b := run(9), run(9)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("one seed, two schedules:\n%v\n%v", a, b)
	}
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case strings.Contains(err.Error(), "SlowDown"), strings.Contains(err.Error(), "reduce your request rate"):
		return "503"
	case strings.Contains(err.Error(), "internal error"), strings.Contains(err.Error(), "InternalError"):
		return "500"
	}
	return "other"
}

// A proxy that sends bodies in small writes changes how the bytes arrive,
// never which: a GET through it is byte-exact.
func TestSegmentedBodiesComeThroughExact(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", 100<<10, 6)
	p, err := Start(srv.Endpoint, Config{SegmentSize: 700, SegmentGap: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	store, err := objstore.NewMinio(objstore.Config{Endpoint: p.URL, Region: srv.Region,
		Credentials: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := store.Stat(context.Background(), "data", "obj")
	if err != nil {
		t.Fatal(err)
	}
	const off, n = 333, 90 << 10
	got, err := get(context.Background(), store, off, n, obj.Version)
	if err != nil || !bytes.Equal(got, testenv.RandomBytes(6, off, n)) {
		t.Fatalf("%d bytes, %v: want the object's %d", len(got), err, n)
	}
	if p.Injected() != 0 {
		t.Errorf("%d faults injected, want none", p.Injected())
	}
}

// A delayed request is forwarded as it is once the delay has passed: the
// bytes come through exact, counted as a delay; one whose client gives
// up first never reaches the server.
func TestDelayedRequestsComeThroughExact(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", 64<<10, 8)
	p, err := Start(srv.Endpoint, Config{Rate: 1, Kinds: []Kind{Delay}, StallFor: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	store, err := objstore.NewMinio(objstore.Config{Endpoint: p.URL, Region: srv.Region,
		Credentials: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := store.Stat(context.Background(), "data", "obj")
	if err != nil {
		t.Fatal(err)
	}
	got, err := get(context.Background(), store, 100, 60<<10, obj.Version)
	if err != nil || !bytes.Equal(got, testenv.RandomBytes(8, 100, 60<<10)) {
		t.Fatalf("%d bytes, %v: want the object's", len(got), err)
	}
	if c := p.Counts(); c["delay"] != 1 {
		t.Errorf("counts %s, want one delay", faultstore.SortedFaultCounts(c))
	}

	slow, err := Start(srv.Endpoint, Config{Rate: 1, Kinds: []Kind{Delay}, StallFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	store, err = objstore.NewMinio(objstore.Config{Endpoint: slow.URL, Region: srv.Region,
		Credentials: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := get(ctx, store, 0, 1024, obj.Version); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a client that gives up during the delay: %v, want its deadline", err)
	}
}
