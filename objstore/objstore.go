// Package objstore is the S3 access layer: a small interface over the object
// store (stat, list, ranged get), its minio-go implementation, a decorator
// that counts requests, and the one lifecycle of a GET that every reader
// uses (Getter).
//
// Everything above this package (the namespace, the read path, the GPU engine)
// speaks only the Store interface, so it can be tested against failures that a
// real server seldom produces (internal/faultstore injects them from outside).
package objstore

import (
	"context"
	"errors"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// Errors about an object or the credentials, each with the errno a file
// operation answers it with. Implementations wrap them so that errors.Is
// works and the message still carries the server's words.
var (
	ErrNotFound     = errno.New(syscall.ENOENT, "object not found")
	ErrNoBucket     = errno.New(syscall.ENOENT, "bucket not found")
	ErrAccessDenied = errno.New(syscall.EACCES, "access denied")
	// ErrChanged means the object is no longer the version a reader pinned:
	// the server refused If-Match, or its size or Last-Modified moved. The
	// handle is stale (ESTALE); a new open sees the new version.
	ErrChanged = errno.New(syscall.ESTALE, "object changed since it was opened")
)

// Version pins one version of an object. Servers that give no ETag (versitygw
// serves files placed straight into its directory without one) are pinned by
// size and Last-Modified instead.
type Version struct {
	ETag         string
	Size         int64
	LastModified time.Time
}

// ID names the version in cache keys: the ETag when there is one.
func (v Version) ID() string {
	if v.ETag != "" {
		return "etag:" + v.ETag
	}
	return "sm:" + strconv.FormatInt(v.Size, 10) + ":" + strconv.FormatInt(v.LastModified.UnixNano(), 10)
}

// Object is what a stat or a listing says about one key.
type Object struct {
	Key string
	Version
}

// Page is one page of a delimited listing.
type Page struct {
	Objects  []Object
	Prefixes []string // common prefixes, each ending in the delimiter
	// Next continues the listing; empty when this was the last page.
	Next string
}

// Store is the object store as the filesystem needs it.
type Store interface {
	// ListBuckets names every bucket the credentials can list.
	ListBuckets(ctx context.Context) ([]string, error)
	// CheckBucket returns nil when the bucket exists and can be listed.
	CheckBucket(ctx context.Context, bucket string) error
	// Stat returns the object's size, ETag and Last-Modified (ErrNotFound if absent).
	Stat(ctx context.Context, bucket, key string) (Object, error)
	// List returns one page of keys under prefix, delimited by '/'.
	// maxKeys <= 0 lets the server choose (1000 on S3).
	List(ctx context.Context, bucket, prefix, continuation string, maxKeys int) (Page, error)
	// GetRange returns exactly n bytes of the object from off, or an error.
	// Every request is pinned to v: a different version yields ErrChanged,
	// never its bytes.
	GetRange(ctx context.Context, bucket, key string, off, n int64, v Version) (io.ReadCloser, error)
}

// IsRetryable says whether a failed request may succeed if sent again:
// anything but a definite answer about the object or the credentials.
func IsRetryable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNoBucket),
		errors.Is(err, ErrAccessDenied), errors.Is(err, ErrChanged),
		errors.Is(err, context.Canceled):
		return false
	}
	return true
}
