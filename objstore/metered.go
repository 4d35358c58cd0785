package objstore

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/s3gdsfs/s3gdsfs/metrics"
)

// Metered counts every request by operation and outcome and times it.
type Metered struct {
	Inner Store
	M     *metrics.Set
}

func (s Metered) observe(op string, start time.Time, err error) {
	s.M.S3Seconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	s.M.S3Requests.WithLabelValues(op, outcome(err)).Inc()
}

// outcome is a bounded label: an error kind, never a free-form message.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNoBucket):
		return "not_found"
	case errors.Is(err, ErrAccessDenied):
		return "denied"
	case errors.Is(err, ErrChanged):
		return "changed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}

func (s Metered) ListBuckets(ctx context.Context) ([]string, error) {
	start := time.Now()
	b, err := s.Inner.ListBuckets(ctx)
	s.observe("list_buckets", start, err)
	return b, err
}

func (s Metered) CheckBucket(ctx context.Context, bucket string) error {
	start := time.Now()
	err := s.Inner.CheckBucket(ctx, bucket)
	s.observe("check_bucket", start, err)
	return err
}

func (s Metered) Stat(ctx context.Context, bucket, key string) (Object, error) {
	start := time.Now()
	o, err := s.Inner.Stat(ctx, bucket, key)
	s.observe("head", start, err)
	return o, err
}

func (s Metered) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (Page, error) {
	start := time.Now()
	p, err := s.Inner.List(ctx, bucket, prefix, cont, maxKeys)
	s.observe("list", start, err)
	return p, err
}

func (s Metered) GetRange(ctx context.Context, bucket, key string, off, n int64, v Version) (io.ReadCloser, error) {
	start := time.Now()
	s.M.BytesInFlight.Add(float64(n))
	body, err := s.Inner.GetRange(ctx, bucket, key, off, n, v)
	s.observe("get", start, err)
	if err != nil {
		s.M.BytesInFlight.Sub(float64(n))
		return nil, err
	}
	return &meteredBody{ReadCloser: body, m: s.M, left: n}, nil
}

// meteredBody counts bytes as they arrive and gives back the in-flight bytes
// that never came when the body is closed early.
type meteredBody struct {
	io.ReadCloser
	m    *metrics.Set
	left int64
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.left -= int64(n)
		b.m.BytesInFlight.Sub(float64(n))
		b.m.S3BytesReceived.Add(float64(n))
	}
	return n, err
}

func (b *meteredBody) Close() error {
	if b.left > 0 {
		b.m.BytesInFlight.Sub(float64(b.left))
		b.left = 0
	}
	return b.ReadCloser.Close()
}
