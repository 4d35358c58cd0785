package objstore

import (
	"context"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"net/http"

	"github.com/minio/minio-go/v7"
)

// Write requests go through getCore, which sends each request once: the
// core's writer retries parts itself (vfs/upload.go), and minio-go's own
// retries under it would multiply the bound on a close.

// PutObject implements Uploader.
func (m *Minio) PutObject(ctx context.Context, bucket, key string, data [][]byte) (Version, error) {
	r, size := newSlicesReader(data)
	info, err := m.getCore.PutObject(ctx, bucket, key, r, size, "", "", minio.PutObjectOptions{})
	if err != nil {
		return Version{}, classifyWrite(err, bucket, key)
	}
	return Version{ETag: cleanETag(info.ETag), Size: size, LastModified: info.LastModified}, nil
}

// CreateMultipart implements Uploader.
func (m *Minio) CreateMultipart(ctx context.Context, bucket, key string) (string, error) {
	id, err := m.getCore.NewMultipartUpload(ctx, bucket, key, minio.PutObjectOptions{})
	if err != nil {
		return "", classifyWrite(err, bucket, key)
	}
	return id, nil
}

// UploadPart implements Uploader.
func (m *Minio) UploadPart(ctx context.Context, bucket, key, uploadID string, number int, data [][]byte) (CompletedPart, error) {
	var sum []byte
	if m.partCRC32C {
		h := crc32.New(castagnoli)
		for _, b := range data {
			h.Write(b)
		}
		sum = h.Sum(nil)
	}
	return m.uploadPart(ctx, bucket, key, uploadID, number, data, sum)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// uploadPart sends a part, signed, or with crc (its CRC32C, big-endian)
// in a trailer and the body unsigned.
func (m *Minio) uploadPart(ctx context.Context, bucket, key, uploadID string, number int, data [][]byte, crc []byte) (CompletedPart, error) {
	r, size := newSlicesReader(data)
	var opts minio.PutObjectPartOptions
	if crc != nil {
		opts.DisableContentSha256 = true
		opts.Trailer = http.Header{"X-Amz-Checksum-Crc32c": {base64.StdEncoding.EncodeToString(crc)}}
	}
	p, err := m.getCore.PutObjectPart(ctx, bucket, key, uploadID, number, r, size, opts)
	if err != nil {
		return CompletedPart{}, classifyWrite(err, bucket, key)
	}
	return CompletedPart{Number: number, ETag: p.ETag}, nil
}

// CompleteMultipart implements Uploader.
func (m *Minio) CompleteMultipart(ctx context.Context, bucket, key, uploadID string, parts []CompletedPart) (Version, error) {
	cp := make([]minio.CompletePart, len(parts))
	for i, p := range parts {
		cp[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
	}
	info, err := m.getCore.CompleteMultipartUpload(ctx, bucket, key, uploadID, cp, minio.PutObjectOptions{})
	if err != nil {
		return Version{}, classifyWrite(err, bucket, key)
	}
	return Version{ETag: cleanETag(info.ETag), Size: info.Size, LastModified: info.LastModified}, nil
}

// AbortMultipart implements Uploader.
func (m *Minio) AbortMultipart(ctx context.Context, bucket, key, uploadID string) error {
	if err := m.getCore.AbortMultipartUpload(ctx, bucket, key, uploadID); err != nil {
		return classifyWrite(err, bucket, key)
	}
	return nil
}

// ListMultipart implements Uploader.
func (m *Minio) ListMultipart(ctx context.Context, bucket, prefix string) ([]PendingUpload, error) {
	var out []PendingUpload
	keyMarker, idMarker := "", ""
	for {
		res, err := m.core.ListMultipartUploads(ctx, bucket, prefix, keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, classifyWrite(err, bucket, prefix)
		}
		for _, u := range res.Uploads {
			out = append(out, PendingUpload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated})
		}
		if !res.IsTruncated || (res.NextKeyMarker == "" && res.NextUploadIDMarker == "") {
			return out, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// CopyObject implements Uploader.
func (m *Minio) CopyObject(ctx context.Context, bucket, src, dst string) (Version, error) {
	info, err := m.getCore.CopyObject(ctx, bucket, src, bucket, dst, nil, minio.CopySrcOptions{}, minio.PutObjectOptions{})
	if err != nil {
		return Version{}, classifyWrite(err, bucket, src)
	}
	return Version{ETag: cleanETag(info.ETag), Size: info.Size, LastModified: info.LastModified}, nil
}

// UploadPartCopy implements Uploader.
func (m *Minio) UploadPartCopy(ctx context.Context, bucket, src, srcETag, dst, uploadID string, number int, off, length int64) (CompletedPart, error) {
	var hdr map[string]string
	if srcETag != "" {
		hdr = map[string]string{"x-amz-copy-source-if-match": `"` + srcETag + `"`}
	}
	p, err := m.getCore.CopyObjectPart(ctx, bucket, src, bucket, dst, uploadID, number, off, length, hdr)
	if err != nil {
		return CompletedPart{}, classifyWrite(err, bucket, dst)
	}
	return CompletedPart{Number: number, ETag: p.ETag}, nil
}

// DeleteObject implements Uploader.
func (m *Minio) DeleteObject(ctx context.Context, bucket, key string) error {
	if err := m.getCore.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return classifyWrite(err, bucket, key)
	}
	return nil
}

// classifyWrite is classify, knowing a missing upload too.
func classifyWrite(err error, bucket, key string) error {
	if minio.ToErrorResponse(err).Code == "NoSuchUpload" {
		return fmt.Errorf("%s/%s: %w (%v)", bucket, key, ErrNoUpload, err)
	}
	return classify(err, bucket, key)
}
