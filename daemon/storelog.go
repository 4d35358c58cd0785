package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// failureLogInterval is the least time between two lines about failed S3
// requests: a store that is down fails every request, and one line in this
// long, with the count of those not logged, says as much as all of them.
const failureLogInterval = 5 * time.Second

// failureLog logs the S3 requests that fail with an error a reader gets
// as an errno (not the store's "no such key", not a reader's interrupt),
// at most one line per interval, and one line when requests succeed again
// after failures.
type failureLog struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time
	armed    atomic.Bool // after the start-up check, which reports its own failure
	failing  atomic.Bool // failures since the last success

	mu       sync.Mutex
	since    time.Time // the first failure since the last success
	failed   int       // failures since the last success
	unlogged int       // failures since the last line
	lastLine time.Time
}

func newFailureLog(log *slog.Logger) *failureLog {
	return &failureLog{log: log, interval: failureLogInterval, now: time.Now}
}

// done records how a request of op on bucket/key ended.
func (l *failureLog) done(op, bucket, key string, err error) {
	if !l.armed.Load() {
		return
	}
	switch {
	case err == nil, errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrNoBucket):
		// The store answered.
		if l.failing.Load() {
			l.recovered()
		}
		return
	case errors.Is(err, context.Canceled), errors.Is(err, objstore.ErrNoRaw):
		return // the reader left, or the caller falls back to a plain GET
	}
	code, ok := errno.Of(err)
	if !ok {
		code = syscall.EIO // as the FUSE adapter answers it
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == 0 {
		l.since = now
		l.failing.Store(true)
	}
	l.failed++
	if !l.lastLine.IsZero() && now.Sub(l.lastLine) < l.interval {
		l.unlogged++
		return
	}
	where := bucket
	if key != "" {
		where += "/" + key
	}
	attrs := []any{"op", op, "key", where, "errno", unix.ErrnoName(code), "cause", err}
	if l.unlogged > 0 {
		attrs = append(attrs, "more_failed_unlogged", l.unlogged)
	}
	l.log.Warn("S3 request failed", attrs...)
	l.lastLine, l.unlogged = now, 0
}

func (l *failureLog) recovered() {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == 0 {
		return
	}
	l.log.Info("S3 requests succeed again", "failed_requests", l.failed,
		"failing_for", now.Sub(l.since).Round(time.Millisecond).String())
	l.failed, l.unlogged, l.lastLine = 0, 0, time.Time{}
	l.failing.Store(false)
}

// logFailures has store's requests logged by l. Like metered, it is a
// RawGetter or an RDMAGetter only where store is one.
func logFailures(store objstore.Store, l *failureLog) objstore.Store {
	ls := loggedStore{store, l}
	raw, isRaw := store.(objstore.RawGetter)
	rdma, isRDMA := store.(objstore.RDMAGetter)
	switch {
	case isRaw && isRDMA:
		return struct {
			loggedStore
			loggedRaw
			objstore.RDMAGetter
		}{ls, loggedRaw{raw, l}, rdma}
	case isRaw:
		return struct {
			loggedStore
			loggedRaw
		}{ls, loggedRaw{raw, l}}
	case isRDMA:
		// An RDMA request that fails is declined to the HTTP path, whose
		// requests are logged.
		return struct {
			loggedStore
			objstore.RDMAGetter
		}{ls, rdma}
	}
	return ls
}

// loggedStore embeds the store, so that what it does beyond these
// requests passes through unlogged.
type loggedStore struct {
	objstore.Store
	l *failureLog
}

func (s loggedStore) ListBuckets(ctx context.Context) ([]string, error) {
	b, err := s.Store.ListBuckets(ctx)
	s.l.done("list_buckets", "", "", err)
	return b, err
}

func (s loggedStore) CheckBucket(ctx context.Context, bucket string) error {
	err := s.Store.CheckBucket(ctx, bucket)
	s.l.done("check_bucket", bucket, "", err)
	return err
}

func (s loggedStore) Stat(ctx context.Context, bucket, key string) (objstore.Object, error) {
	o, err := s.Store.Stat(ctx, bucket, key)
	s.l.done("head", bucket, key, err)
	return o, err
}

func (s loggedStore) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (objstore.Page, error) {
	p, err := s.Store.List(ctx, bucket, prefix, cont, maxKeys)
	s.l.done("list", bucket, prefix, err)
	return p, err
}

func (s loggedStore) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	body, err := s.Store.GetRange(ctx, bucket, key, off, n, v)
	s.l.done("get", bucket, key, err)
	return body, err
}

type loggedRaw struct {
	inner objstore.RawGetter
	l     *failureLog
}

func (s loggedRaw) GetRaw(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (*objstore.RawBody, error) {
	body, err := s.inner.GetRaw(ctx, bucket, key, off, n, v)
	s.l.done("get", bucket, key, err)
	return body, err
}
