package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// opTimeout bounds one helper call; generous enough for GiB-sized uploads
// on a slow shared machine.
const opTimeout = 15 * time.Minute

// CreateBucket creates bucket name or fails the test.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.MakeBucket(ctx, name); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// PutObject stores data under bucket/key or fails the test.
func (s *Server) PutObject(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.Put(ctx, bucket, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// PutRandomObject stores RandomData(size, seed) under bucket/key, streaming
// it so huge objects cost no memory, and returns its hex sha256.
func (s *Server) PutRandomObject(t testing.TB, bucket, key string, size, seed int64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sum, err := s.PutRandom(ctx, bucket, key, size, seed)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return sum
}

// MakeBucket is CreateBucket for callers without a testing.TB.
func (s *Server) MakeBucket(ctx context.Context, name string) error {
	if err := s.Client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		return fmt.Errorf("create bucket %q: %w", name, err)
	}
	return nil
}

// Put is PutObject for callers without a testing.TB.
func (s *Server) Put(ctx context.Context, bucket, key string, r io.Reader, size int64) error {
	if _, err := s.Client.PutObject(ctx, bucket, key, r, size, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	return nil
}

// PutRandom is PutRandomObject for callers without a testing.TB.
func (s *Server) PutRandom(ctx context.Context, bucket, key string, size, seed int64) (string, error) {
	h := sha256.New()
	if err := s.Put(ctx, bucket, key, io.TeeReader(RandomData(size, seed), h), size); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
