package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// scripted answers every request with err.
type scripted struct{ err error }

func (s *scripted) ListBuckets(context.Context) ([]string, error) { return nil, s.err }
func (s *scripted) CheckBucket(context.Context, string) error     { return s.err }
func (s *scripted) Stat(context.Context, string, string) (objstore.Object, error) {
	return objstore.Object{}, s.err
}
func (s *scripted) List(context.Context, string, string, string, int) (objstore.Page, error) {
	return objstore.Page{}, s.err
}
func (s *scripted) GetRange(context.Context, string, string, int64, int64, objstore.Version) (io.ReadCloser, error) {
	if s.err != nil {
		return nil, s.err
	}
	return io.NopCloser(strings.NewReader("")), nil
}

// Failed requests are logged with operation, key, errno and cause, at most
// one line per interval with the count of those left out; the store's
// definite answers and a reader's interrupt are not failures; the first
// success after failures says how many there were and for how long.
func TestFailedRequestsAreLoggedRateLimited(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(1000, 0)
	l := newFailureLog(slog.New(slog.NewTextHandler(&logs, nil)))
	l.now = func() time.Time { return now }
	store := &scripted{}
	s := logFailures(store, l)
	ctx := context.Background()
	lines := func() []string { return strings.Split(strings.TrimSpace(logs.String()), "\n") }

	store.err = fmt.Errorf("dial tcp 127.0.0.1:9: connect: connection refused")
	s.Stat(ctx, "data", "a.txt")
	if logs.Len() != 0 {
		t.Fatalf("logged before the start-up check passed: %s", logs.String())
	}
	l.armed.Store(true)

	s.Stat(ctx, "data", "a.txt")
	want := []string{"level=WARN", `msg="S3 request failed"`, "op=head", "key=data/a.txt", "errno=EIO", `cause="dial tcp 127.0.0.1:9: connect: connection refused"`}
	for _, w := range want {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("the line does not say %s: %s", w, logs.String())
		}
	}
	// Within the interval: counted, not logged.
	for i := 0; i < 9; i++ {
		now = now.Add(100 * time.Millisecond)
		s.GetRange(ctx, "data", "b.bin", 0, 10, objstore.Version{})
	}
	if n := len(lines()); n != 1 {
		t.Fatalf("%d lines for 10 failures within %s, want 1:\n%s", n, l.interval, logs.String())
	}
	// Not failures: the store's answer that a key is absent, an interrupt.
	store.err = fmt.Errorf("data/c: %w", context.Canceled)
	s.Stat(ctx, "data", "c")
	now = now.Add(l.interval)
	// The next line after the interval carries the count left out, and the
	// errno the error carries.
	store.err = fmt.Errorf("data/b.bin: %w", errno.New(syscall.ESTALE, "object changed"))
	s.GetRange(ctx, "data", "b.bin", 0, 10, objstore.Version{})
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "more_failed_unlogged=9") ||
		!strings.Contains(got[1], "errno=ESTALE") || !strings.Contains(got[1], "op=get") {
		t.Fatalf("after the interval, want a second line with errno=ESTALE, op=get, more_failed_unlogged=9:\n%s", logs.String())
	}
	store.err = objstore.ErrNotFound
	now = now.Add(2 * time.Second)
	s.Stat(ctx, "data", "gone")
	got := lines()
	if len(got) != 3 || !strings.Contains(got[2], `msg="S3 requests succeed again"`) ||
		!strings.Contains(got[2], "failed_requests=11") || !strings.Contains(got[2], "failing_for=7.9s") {
		t.Fatalf("after the store answered, want a line saying 11 requests failed for 7.9s:\n%s", logs.String())
	}
	// Successes after that log nothing; a new failure is logged at once.
	store.err = nil
	s.Stat(ctx, "data", "a.txt")
	store.err = fmt.Errorf("connection reset by peer")
	s.List(ctx, "data", "dir/", "", 1)
	if got := lines(); len(got) != 4 || !strings.Contains(got[3], "op=list") || strings.Contains(got[3], "more_failed_unlogged") {
		t.Fatalf("want a fourth line for the new failure, alone:\n%s", logs.String())
	}
}

// The logging decorator offers raw and RDMA GETs only where the store does,
// as metered does.
func TestLoggedStoreKeepsWhatTheStoreTakes(t *testing.T) {
	client, err := NewStore(withEndpoint(Default()))
	if err != nil {
		t.Fatal(err)
	}
	l := newFailureLog(slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		name      string
		store     objstore.Store
		raw, rdma bool
	}{
		{"the client", client, true, true},
		{"a decorator of the interface", onlyStore{client}, false, false},
		{"a decorator with raw GETs", rawOnly{client, client}, true, false},
	} {
		s := logFailures(c.store, l)
		if _, ok := s.(objstore.RawGetter); ok != c.raw {
			t.Errorf("%s: logged store a RawGetter %v, want %v", c.name, ok, c.raw)
		}
		if _, ok := s.(objstore.RDMAGetter); ok != c.rdma {
			t.Errorf("%s: logged store an RDMAGetter %v, want %v", c.name, ok, c.rdma)
		}
	}
}
