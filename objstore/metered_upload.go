package objstore

import (
	"context"
	"time"

	"github.com/s3gdsfs/s3gdsfs/metrics"
)

// MeteredUploader counts every write request by operation and outcome and
// times it, as Metered does reads.
type MeteredUploader struct {
	Inner Uploader
	M     *metrics.Set
}

func (s MeteredUploader) observe(op string, start time.Time, err error) {
	Metered{M: s.M}.observe(op, start, err)
}

func (s MeteredUploader) PutObject(ctx context.Context, bucket, key string, data [][]byte) (Version, error) {
	start := time.Now()
	v, err := s.Inner.PutObject(ctx, bucket, key, data)
	s.observe("put", start, err)
	return v, err
}

func (s MeteredUploader) CreateMultipart(ctx context.Context, bucket, key string) (string, error) {
	start := time.Now()
	id, err := s.Inner.CreateMultipart(ctx, bucket, key)
	s.observe("create_multipart", start, err)
	return id, err
}

func (s MeteredUploader) UploadPart(ctx context.Context, bucket, key, uploadID string, number int, data [][]byte) (CompletedPart, error) {
	start := time.Now()
	p, err := s.Inner.UploadPart(ctx, bucket, key, uploadID, number, data)
	s.observe("upload_part", start, err)
	return p, err
}

func (s MeteredUploader) CompleteMultipart(ctx context.Context, bucket, key, uploadID string, parts []CompletedPart) (Version, error) {
	start := time.Now()
	v, err := s.Inner.CompleteMultipart(ctx, bucket, key, uploadID, parts)
	s.observe("complete_multipart", start, err)
	return v, err
}

func (s MeteredUploader) AbortMultipart(ctx context.Context, bucket, key, uploadID string) error {
	start := time.Now()
	err := s.Inner.AbortMultipart(ctx, bucket, key, uploadID)
	s.observe("abort_multipart", start, err)
	return err
}

func (s MeteredUploader) ListMultipart(ctx context.Context, bucket, prefix string) ([]PendingUpload, error) {
	start := time.Now()
	u, err := s.Inner.ListMultipart(ctx, bucket, prefix)
	s.observe("list_multipart", start, err)
	return u, err
}

func (s MeteredUploader) CopyObject(ctx context.Context, bucket, src, dst string) (Version, error) {
	start := time.Now()
	v, err := s.Inner.CopyObject(ctx, bucket, src, dst)
	s.observe("copy", start, err)
	return v, err
}

func (s MeteredUploader) UploadPartCopy(ctx context.Context, bucket, src, srcETag, dst, uploadID string, number int, off, length int64) (CompletedPart, error) {
	start := time.Now()
	p, err := s.Inner.UploadPartCopy(ctx, bucket, src, srcETag, dst, uploadID, number, off, length)
	s.observe("upload_part_copy", start, err)
	return p, err
}

func (s MeteredUploader) DeleteObject(ctx context.Context, bucket, key string) error {
	start := time.Now()
	err := s.Inner.DeleteObject(ctx, bucket, key)
	s.observe("delete", start, err)
	return err
}
