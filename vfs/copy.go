package vfs

import (
	"context"
	"fmt"
	"sync"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// copyObject copies src, of size bytes, to dst within bucket on the server,
// as a rename does: one CopyObject up to Writes.CopyLimit, and past it a
// multipart upload of dst whose parts are ranges of src (copyParts).
// srcETag, unless "", is the version of src a copy in parts copies.
func (f *FS) copyObject(ctx context.Context, bucket, src, dst string, size int64, srcETag string) error {
	if size <= f.cfg.Writes.CopyLimit {
		return f.retryWrite(ctx, func(ctx context.Context) error {
			_, err := f.w.up.CopyObject(ctx, bucket, src, dst)
			return err
		})
	}
	return f.copyParts(ctx, bucket, src, dst, size, srcETag)
}

// copyPartSize is the part size of a copy of size bytes: CopyPartSize, or
// larger where that would take more parts than S3 allows.
func copyPartSize(size, partSize int64) int64 {
	return max(partSize, (size+objstore.MaxParts-1)/objstore.MaxParts)
}

// copyParts copies src to dst by parts, PartsInFlight at once, each
// request retried as an upload's are. It is recorded in the journal as an
// upload is, and any failure aborts it: dst is made whole or not at all.
func (f *FS) copyParts(ctx context.Context, bucket, src, dst string, size int64, srcETag string) error {
	up := f.w.up
	partSize := copyPartSize(size, f.cfg.Writes.CopyPartSize)
	n := int((size + partSize - 1) / partSize)
	var id string
	err := f.retryWrite(ctx, func(ctx context.Context) (err error) {
		id, err = up.CreateMultipart(ctx, bucket, dst)
		return err
	})
	if err != nil {
		return fmt.Errorf("copy in parts: %w", err)
	}
	f.w.journal.begin(bucket, dst, id)

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts := make([]objstore.CompletedPart, n)
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == n || first != nil {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for range min(f.cfg.Writes.PartsInFlight, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, ok := take()
				if !ok {
					return
				}
				off := int64(i) * partSize
				err := f.retryWrite(pctx, func(ctx context.Context) (err error) {
					parts[i], err = up.UploadPartCopy(ctx, bucket, src, srcETag, dst, id, i+1, off, min(partSize, size-off))
					return err
				})
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("copy part %d of %d: %w", i+1, n, err)
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	err = first
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = f.retryWrite(ctx, func(ctx context.Context) error {
			_, err := up.CompleteMultipart(ctx, bucket, dst, id, parts)
			return err
		})
	}
	if err != nil {
		f.abortMultipart(bucket, dst, id)
		return err
	}
	f.w.journal.end(id)
	return nil
}
