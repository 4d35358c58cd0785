package objstore

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// Uploader is the store's write side, which a mount with writes allowed
// uses: whole-object PUTs, multipart uploads, and the copy and delete a
// rename is made of. Object bytes are handed over as slices (the core's
// part buffers are made of cache blocks) and never copied into one.
type Uploader interface {
	// PutObject stores data as the object key in one request.
	PutObject(ctx context.Context, bucket, key string, data [][]byte) (Version, error)
	// CreateMultipart starts a multipart upload and returns its ID.
	CreateMultipart(ctx context.Context, bucket, key string) (string, error)
	// UploadPart sends part number (1 to MaxParts) of an upload.
	UploadPart(ctx context.Context, bucket, key, uploadID string, number int, data [][]byte) (CompletedPart, error)
	// CompleteMultipart makes the parts, in order, the object: until then
	// nothing of the upload is visible.
	CompleteMultipart(ctx context.Context, bucket, key, uploadID string, parts []CompletedPart) (Version, error)
	// AbortMultipart drops an upload and the parts it holds.
	AbortMultipart(ctx context.Context, bucket, key, uploadID string) error
	// ListMultipart lists the uploads in progress under prefix.
	ListMultipart(ctx context.Context, bucket, prefix string) ([]PendingUpload, error)
	// CopyObject copies src to dst within bucket on the server, in one
	// request: src may be at most MaxCopyObject.
	CopyObject(ctx context.Context, bucket, src, dst string) (Version, error)
	// UploadPartCopy makes part number of the upload of dst the length
	// bytes of src from off, copied on the server: how an object larger
	// than one CopyObject takes is copied. srcETag, unless "", is the
	// version of src the part must come from (ErrChanged otherwise), so
	// that the parts of one copy are of one version.
	UploadPartCopy(ctx context.Context, bucket, src, srcETag, dst, uploadID string, number int, off, length int64) (CompletedPart, error)
	// DeleteObject removes key; a key that does not exist is no error.
	DeleteObject(ctx context.Context, bucket, key string) error
}

// CompletedPart is one uploaded part, as CompleteMultipart needs it.
type CompletedPart struct {
	Number int
	ETag   string
}

// PendingUpload is a multipart upload that was neither completed nor aborted.
type PendingUpload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// S3's bounds on multipart uploads.
const (
	MaxParts       = 10000
	MinPartSize    = 5 << 20 // every part but the last
	MaxPartSize    = 5 << 30
	MaxCopyObject  = 5 << 30 // the largest object one CopyObject copies
	MaxUploadParts = MaxParts
)

// ErrNoUpload means the multipart upload named is not (or no longer) in
// progress: completed or aborted already.
var ErrNoUpload = errno.New(syscall.ENOENT, "no such multipart upload")

// IsRetryableWrite says whether a failed write request may succeed if sent
// again: IsRetryable, less a missing upload (it will stay missing).
func IsRetryableWrite(err error) bool {
	return IsRetryable(err) && !errors.Is(err, ErrNoUpload)
}

// slicesReader reads a list of byte slices as one stream, and seeks, so
// that a request can be signed and sent again without a copy.
type slicesReader struct {
	data [][]byte
	size int64
}

func newSlicesReader(data [][]byte) (*io.SectionReader, int64) {
	r := &slicesReader{data: data}
	for _, d := range data {
		r.size += int64(len(d))
	}
	return io.NewSectionReader(r, 0, r.size), r.size
}

func (r *slicesReader) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for _, d := range r.data {
		if off >= int64(len(d)) {
			off -= int64(len(d))
			continue
		}
		k := copy(p[n:], d[off:])
		n += k
		off = 0
		if n == len(p) {
			return n, nil
		}
	}
	return n, io.EOF
}
