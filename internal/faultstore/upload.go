package faultstore

import (
	"context"
	"sync"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Uploads is an Uploader decorator for tests: a request that Fail answers
// with an error fails with it, before it reaches Inner. op is one of put,
// create, part, complete, abort, list, copy, copy_part, delete; part is
// the part number (0 for the others) and attempt counts that op and part's calls
// from 1.
type Uploads struct {
	Inner objstore.Uploader
	Fail  func(op string, part, attempt int) error

	mu    sync.Mutex
	calls map[[2]any]int
}

func (u *Uploads) fault(op string, part int) error {
	u.mu.Lock()
	if u.calls == nil {
		u.calls = make(map[[2]any]int)
	}
	k := [2]any{op, part}
	u.calls[k]++
	n := u.calls[k]
	u.mu.Unlock()
	if u.Fail == nil {
		return nil
	}
	return u.Fail(op, part, n)
}

// Calls is how many times op was asked for (any part).
func (u *Uploads) Calls(op string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for k, c := range u.calls {
		if k[0] == op {
			n += c
		}
	}
	return n
}

func (u *Uploads) PutObject(ctx context.Context, bucket, key string, data [][]byte) (objstore.Version, error) {
	if err := u.fault("put", 0); err != nil {
		return objstore.Version{}, err
	}
	return u.Inner.PutObject(ctx, bucket, key, data)
}

func (u *Uploads) CreateMultipart(ctx context.Context, bucket, key string) (string, error) {
	if err := u.fault("create", 0); err != nil {
		return "", err
	}
	return u.Inner.CreateMultipart(ctx, bucket, key)
}

func (u *Uploads) UploadPart(ctx context.Context, bucket, key, id string, number int, data [][]byte) (objstore.CompletedPart, error) {
	if err := u.fault("part", number); err != nil {
		return objstore.CompletedPart{}, err
	}
	return u.Inner.UploadPart(ctx, bucket, key, id, number, data)
}

func (u *Uploads) CompleteMultipart(ctx context.Context, bucket, key, id string, parts []objstore.CompletedPart) (objstore.Version, error) {
	if err := u.fault("complete", 0); err != nil {
		return objstore.Version{}, err
	}
	return u.Inner.CompleteMultipart(ctx, bucket, key, id, parts)
}

func (u *Uploads) AbortMultipart(ctx context.Context, bucket, key, id string) error {
	if err := u.fault("abort", 0); err != nil {
		return err
	}
	return u.Inner.AbortMultipart(ctx, bucket, key, id)
}

func (u *Uploads) ListMultipart(ctx context.Context, bucket, prefix string) ([]objstore.PendingUpload, error) {
	if err := u.fault("list", 0); err != nil {
		return nil, err
	}
	return u.Inner.ListMultipart(ctx, bucket, prefix)
}

func (u *Uploads) CopyObject(ctx context.Context, bucket, src, dst string) (objstore.Version, error) {
	if err := u.fault("copy", 0); err != nil {
		return objstore.Version{}, err
	}
	return u.Inner.CopyObject(ctx, bucket, src, dst)
}

func (u *Uploads) UploadPartCopy(ctx context.Context, bucket, src, srcETag, dst, id string, number int, off, length int64) (objstore.CompletedPart, error) {
	if err := u.fault("copy_part", number); err != nil {
		return objstore.CompletedPart{}, err
	}
	return u.Inner.UploadPartCopy(ctx, bucket, src, srcETag, dst, id, number, off, length)
}

func (u *Uploads) DeleteObject(ctx context.Context, bucket, key string) error {
	if err := u.fault("delete", 0); err != nil {
		return err
	}
	return u.Inner.DeleteObject(ctx, bucket, key)
}
