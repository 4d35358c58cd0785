package vfs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/internal/setting"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// WriteConfig is the write side of a mount (docs/operations.md, "Writes").
// Writes are off unless Allow is set; then a new file written in order is
// uploaded while it is written and becomes an object when it is closed.
type WriteConfig struct {
	// Allow lets files be created, written, renamed and removed, and
	// directories made.
	Allow bool
	// AllowOverwrite lets a write (open with O_TRUNC) or a rename replace
	// an existing object.
	AllowOverwrite bool
	// PartSize is the size of each part of a multipart upload: a file
	// closed before its first part is full is sent in one PUT. S3 takes at
	// most 10,000 parts, so the largest file is 10,000 parts.
	PartSize int64
	// PartsInFlight is how many parts of one file are sent at once; a
	// writer that has filled one more part waits for one of them. A copy
	// in parts copies as many at once.
	PartsInFlight int
	// CopyLimit is the largest object a rename copies in one CopyObject;
	// a larger one is copied in parts of CopyPartSize (UploadPartCopy),
	// which take no memory here: the server copies them.
	CopyLimit    int64
	CopyPartSize int64
	// Journal is a directory where the daemon records the multipart
	// uploads it has open, so that its next start aborts those a killed
	// daemon left; "" records none.
	Journal string
}

// DefaultWriteConfig is off; the rest are the sizes a mount that allows
// writes uses.
func DefaultWriteConfig() WriteConfig {
	return WriteConfig{PartSize: 16 << 20, PartsInFlight: 16, CopyLimit: objstore.MaxCopyObject, CopyPartSize: 1 << 30}
}

// validate refuses sizes the store or the memory limit cannot take.
func (w WriteConfig) validate(blockSize int, memoryLimit int64) error {
	if !w.Allow {
		return nil // the sizes are not used
	}
	bs := int64(blockSize)
	switch {
	case w.PartSize < objstore.MinPartSize || w.PartSize > objstore.MaxPartSize:
		return setting.RefuseSize("PartSize", w.PartSize, "between %s and %s (S3's bounds on a part)",
			setting.Size(objstore.MinPartSize), setting.Size(objstore.MaxPartSize))
	case w.PartSize%bs != 0:
		return setting.RefuseSize("PartSize", w.PartSize, "a multiple of the block size (%s): parts are made of blocks", setting.Size(bs))
	case w.PartsInFlight < 1 || w.PartsInFlight > 64:
		return setting.Refuse("PartsInFlight", w.PartsInFlight, "between 1 and 64")
	case w.CopyLimit < 1 || w.CopyLimit > objstore.MaxCopyObject:
		return setting.RefuseSize("CopyLimit", w.CopyLimit, "between 1 byte and %s (the largest object one CopyObject copies)",
			setting.Size(objstore.MaxCopyObject))
	case w.CopyPartSize < objstore.MinPartSize || w.CopyPartSize > objstore.MaxPartSize:
		return setting.RefuseSize("CopyPartSize", w.CopyPartSize, "between %s and %s (S3's bounds on a part)",
			setting.Size(objstore.MinPartSize), setting.Size(objstore.MaxPartSize))
	case w.PartSize*int64(w.PartsInFlight+1) > memoryLimit:
		return setting.RefuseSize("PartSize", w.PartSize, "%d parts in flight and the one being filled (%s) must fit in the memory limit (%s)",
			w.PartsInFlight, setting.Size(w.PartSize*int64(w.PartsInFlight+1)), setting.Size(memoryLimit))
	}
	return nil
}

// Errors of the write path, each with the errno the file operation answers.
var (
	// ErrReadOnly: writes are not allowed on the mount.
	ErrReadOnly = errno.New(syscall.EROFS, "the mount is read-only (--allow-writes)")
	// ErrNotAppend: a write anywhere but at the end of what was written.
	ErrNotAppend = errno.New(syscall.EINVAL, "files are written in order: a write must start where the last one ended")
	// ErrUploaded: a write after the file's upload ended (close or fsync).
	ErrUploaded = errno.New(syscall.EBADF, "the file was uploaded already (closed or fsynced); a file is written once")
	// ErrBusy: the file is being written (read, second writer, rename, unlink).
	ErrBusy = errno.New(syscall.EBUSY, "the file is being written")
	// ErrModify: opening an existing object for writing without O_TRUNC.
	ErrModify = errno.New(syscall.EPERM, "an existing object cannot be modified, only replaced whole (O_TRUNC) with --allow-overwrite")
	// ErrOverwrite: replacing an existing object without AllowOverwrite.
	ErrOverwrite = errno.New(syscall.EPERM, "replacing an existing object needs --allow-overwrite")
	// ErrExists: creating a name that exists.
	ErrExists = errno.New(syscall.EEXIST, "the name exists")
	// ErrTruncate: a size change other than to the size written.
	ErrTruncate = errno.New(syscall.EINVAL, "a file being written can only be truncated to its size (0 at open)")
	// ErrTooLarge: past the last part S3 takes.
	ErrTooLarge = errno.New(syscall.EFBIG, "the file would need more than 10,000 parts (a larger write part size)")
	// ErrUpload: the upload failed; nothing of the file is visible.
	ErrUpload = errno.New(syscall.EIO, "the upload failed; nothing was written")
)

// Upload is one file being written: its bytes go to S3 in parts while the
// writer writes (or in one PUT if the file ends within the first part), and
// the object appears when Finish succeeds. It knows nothing of FUSE.
type Upload struct {
	f      *FS
	up     objstore.Uploader
	entry  Entry // where the bytes are uploaded
	start  time.Time
	ctx    context.Context // the upload's requests; cancelled when it fails
	cancel context.CancelFunc
	slots  chan struct{} // parts being sent

	wmu      sync.Mutex // one Write or Finish at a time
	size     int64
	extend   int64          // a size set by Truncate beyond size: zeros up to it at Finish
	shown    atomic.Int64   // max(size, extend), read without waiting for a Write
	cur      []*cache.Block // the part being filled
	curLen   int64
	next     int // number of the next part
	uploadID string
	finished bool
	result   error

	mu sync.Mutex
	// name is the file as the namespace shows it: entry, or where a rename
	// while it was written moved it (renameTo); its Version once finished.
	name    Entry
	parts   []objstore.CompletedPart
	failure error
	sending sync.WaitGroup
}

func (f *FS) newUpload(e Entry) *Upload {
	ctx, cancel := context.WithCancel(context.Background())
	f.m.UploadsInFlight.Inc()
	return &Upload{f: f, up: f.w.up, entry: e, name: e, start: time.Now(), ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, f.cfg.Writes.PartsInFlight), next: 1}
}

// Entry is the file as the namespace shows it: its version once finished.
func (u *Upload) Entry() Entry {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.name
}

// renameTo has the upload end as the object dst: a rename of a file still
// open for writing (safetensors renames its temporary file before it
// closes it).
func (u *Upload) renameTo(dst Entry) {
	u.mu.Lock()
	u.name = dst
	u.mu.Unlock()
}

// Size is the file's size so far: the bytes written, or the size set by
// Truncate if larger. It does not wait for a Write that waits for a part
// to be sent.
func (u *Upload) Size() int64 { return u.shown.Load() }

// Truncate sets the file's size while it is written. It may not cut what
// was written (ErrTruncate); a larger size is the size the file will have
// (writers that set the size first and then write, as safetensors does):
// writes go on from the end of what was written, and what they have not
// written by Finish is zeros.
func (u *Upload) Truncate(size int64) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	switch {
	case u.finished:
		return ErrUploaded
	case size < u.size:
		return fmt.Errorf("%s: truncate to %d, %d bytes written: %w", u.entry.Path(), size, u.size, ErrTruncate)
	}
	u.extend = size
	u.shown.Store(size)
	return nil
}

// Started is when the file was opened for writing: its time until it is uploaded.
func (u *Upload) Started() time.Time { return u.start }

func (u *Upload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.failure
}

// fail records the first error and stops the upload's other requests.
func (u *Upload) fail(err error) {
	u.mu.Lock()
	if u.failure == nil {
		u.failure = err
	}
	u.mu.Unlock()
	u.cancel()
}

// Write appends data at off, which must be the size written so far. It
// returns once the bytes are in part buffers; while PartsInFlight parts are
// being sent and the next is full, or while memory is short, it waits.
// ctx ends the wait (the writer was interrupted).
func (u *Upload) Write(ctx context.Context, off int64, data []byte) (int, error) {
	return u.writeFrom(ctx, off, data, WritePOSIX)
}

// Paths bytes come into an upload by, the label of s3gdsfs_write_bytes_total.
const (
	WritePOSIX   = "posix"    // write(2)
	WriteGPUHTTP = "gpu_http" // the GPU write ioctl, through pinned staging
	WriteGPURDMA = "gpu_rdma" // the GPU write ioctl, whole parts as RDMA UploadParts
)

// WriteFrom is Write of bytes that came by path (WritePOSIX, WriteGPUHTTP):
// the same upload, parts and errors, counted by where they came from.
func (u *Upload) WriteFrom(ctx context.Context, off int64, data []byte, path string) (int, error) {
	return u.writeFrom(ctx, off, data, path)
}

func (u *Upload) writeFrom(ctx context.Context, off int64, data []byte, path string) (int, error) {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	switch {
	case u.finished:
		return 0, ErrUploaded
	case off != u.size:
		return 0, fmt.Errorf("%s: write at %d, %d bytes written: %w", u.entry.Path(), off, u.size, ErrNotAppend)
	}
	if err := u.failed(); err != nil {
		return 0, errno.With(syscall.EIO, err)
	}
	n, err := u.write(ctx, data)
	u.f.m.WriteBytes.WithLabelValues(path).Add(float64(n))
	return n, err
}

func (u *Upload) write(ctx context.Context, data []byte) (int, error) {
	partSize := u.f.cfg.Writes.PartSize
	n := 0
	for n < len(data) {
		if u.curLen == partSize {
			if err := u.sendPart(ctx); err != nil {
				return u.wrote(n, err)
			}
		}
		if u.cur == nil {
			if err := u.gather(ctx); err != nil {
				return u.wrote(n, err)
			}
		}
		b := u.cur[u.curLen/int64(u.f.cfg.BlockSize)]
		k := min(cap(b.Data)-len(b.Data), len(data)-n)
		b.Data = append(b.Data, data[n:n+k]...)
		n += k
		u.curLen += int64(k)
	}
	return u.wrote(n, nil)
}

// gather takes the memory of a whole part (its blocks) before any byte is
// put in it, one writer at a time: writers that each held part of a part
// while waiting for the rest could wait for each other forever. A writer
// waiting here holds only parts being sent, which free their memory.
func (u *Upload) gather(ctx context.Context) error {
	blocks, err := u.takePart(ctx)
	if err != nil {
		return err
	}
	u.cur = blocks
	return nil
}

// takePart takes the blocks of one part, empty, as gather says.
func (u *Upload) takePart(ctx context.Context) ([]*cache.Block, error) {
	u.f.w.gather.Lock()
	defer u.f.w.gather.Unlock()
	blocks := make([]*cache.Block, 0, u.f.cfg.Writes.PartSize/int64(u.f.cfg.BlockSize))
	for len(blocks) < cap(blocks) {
		b, err := u.f.blocks.NewBlock(ctx, true)
		if err != nil {
			release(blocks)
			return nil, err
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

func (u *Upload) wrote(n int, err error) (int, error) {
	u.size += int64(n)
	u.shown.Store(max(u.size, u.extend))
	if n > 0 {
		return n, nil // a short write; the next one meets the error
	}
	if errors.Is(err, context.Canceled) {
		err = errno.With(syscall.EINTR, err)
	}
	return 0, err
}

// sendPart hands the filled part to a sender, once one of PartsInFlight is free.
func (u *Upload) sendPart(ctx context.Context) error {
	if u.next > objstore.MaxParts {
		err := fmt.Errorf("%s: %w", u.entry.Path(), ErrTooLarge)
		u.fail(err)
		return err
	}
	if err := u.begin(ctx); err != nil {
		return err
	}
	blocks, number := u.cur, u.next
	u.cur, u.curLen = nil, 0
	u.next++
	u.sending.Add(1)
	go func() {
		defer u.sending.Done()
		defer func() { <-u.slots }()
		defer release(blocks)
		var part objstore.CompletedPart
		err := u.retry(func(ctx context.Context) (err error) {
			part, err = u.up.UploadPart(ctx, u.entry.Bucket, u.entry.Key, u.uploadID, number, views(blocks))
			return err
		})
		if err != nil {
			u.f.log.Warn("upload of a part failed", "path", u.entry.Path(), "part", number, "err", err)
			u.fail(err)
			return
		}
		u.mu.Lock()
		u.parts = append(u.parts, part)
		u.mu.Unlock()
	}()
	return nil
}

// begin starts the multipart upload if it has not started, and takes one
// of the PartsInFlight for the next part.
func (u *Upload) begin(ctx context.Context) error {
	if u.uploadID == "" {
		var id string
		err := u.retry(func(ctx context.Context) (err error) {
			id, err = u.up.CreateMultipart(ctx, u.entry.Bucket, u.entry.Key)
			return err
		})
		if err != nil {
			u.fail(err)
			return errno.With(syscall.EIO, err)
		}
		u.uploadID = id
		u.f.w.journal.begin(u.entry.Bucket, u.entry.Key, id)
	}
	select {
	case u.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-u.ctx.Done():
		return errno.With(syscall.EIO, u.failed())
	}
}

// PartSize is the size of every part of the upload but the last: parts
// start at its multiples.
func (u *Upload) PartSize() int64 { return u.f.cfg.Writes.PartSize }

// CompletedPart is a stored part of a multipart upload, as a RemotePart's
// sender reports it (the store's type, named here for the sender's side).
type CompletedPart = objstore.CompletedPart

// RemotePart is a whole part of an upload whose bytes a sender of its own
// carries (Upload.WritePart): an RDMA UploadPart that the server reads out
// of device memory.
type RemotePart struct {
	objstore.PartTarget
	u        *Upload
	sentHTTP bool
}

// SendHTTP sends the part over HTTP as the upload's own parts go, for a
// sender whose own way was declined: fill puts the part's Size bytes, in
// order, into buffers of the upload's memory (taken as a part being
// filled takes it), which are then sent with the mount's retries. It
// replaces whatever a declined attempt stored under the part's number.
func (p *RemotePart) SendHTTP(ctx context.Context, fill func(bufs [][]byte) error) (objstore.CompletedPart, error) {
	u := p.u
	blocks, err := u.takePart(ctx)
	if err != nil {
		return objstore.CompletedPart{}, err
	}
	defer release(blocks)
	for _, b := range blocks {
		b.Data = b.Data[:cap(b.Data)]
	}
	if err := fill(views(blocks)); err != nil {
		return objstore.CompletedPart{}, err
	}
	p.sentHTTP = true
	var part objstore.CompletedPart
	err = u.retry(func(ctx context.Context) (err error) {
		part, err = u.up.UploadPart(ctx, p.Bucket, p.Key, p.UploadID, p.Number, views(blocks))
		return err
	})
	return part, err
}

// WritePart appends one whole part at off, which must be the size written
// so far and a multiple of PartSize, whose bytes send carries itself. The
// part takes the next number, after the part being filled (sent first),
// and one of PartsInFlight; send runs in the background with the upload's
// context, as the upload's own parts do, and its part joins theirs in
// order. A send that fails fails the upload: nothing is visible and the
// multipart upload is aborted at Finish. The returned channel receives
// send's error, or nil once the part is stored. The part's bytes count
// under path, or httpPath when send sent them through SendHTTP.
func (u *Upload) WritePart(ctx context.Context, off int64, path, httpPath string,
	send func(ctx context.Context, p *RemotePart) (objstore.CompletedPart, error)) (<-chan error, error) {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	partSize := u.f.cfg.Writes.PartSize
	switch {
	case u.finished:
		return nil, ErrUploaded
	case off != u.size:
		return nil, fmt.Errorf("%s: write at %d, %d bytes written: %w", u.entry.Path(), off, u.size, ErrNotAppend)
	case off%partSize != 0:
		return nil, errno.New(syscall.EINVAL, fmt.Sprintf("%s: a whole part at %d, not a multiple of the part size %d", u.entry.Path(), off, partSize))
	}
	if err := u.failed(); err != nil {
		return nil, errno.With(syscall.EIO, err)
	}
	if u.curLen == partSize {
		if err := u.sendPart(ctx); err != nil {
			return nil, err
		}
	}
	if u.next > objstore.MaxParts {
		err := fmt.Errorf("%s: %w", u.entry.Path(), ErrTooLarge)
		u.fail(err)
		return nil, err
	}
	if err := u.begin(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			err = errno.With(syscall.EINTR, err)
		}
		return nil, err
	}
	p := &RemotePart{PartTarget: objstore.PartTarget{Bucket: u.entry.Bucket, Key: u.entry.Key,
		UploadID: u.uploadID, Number: u.next, Size: partSize}, u: u}
	u.next++
	u.size += partSize
	u.shown.Store(max(u.size, u.extend))
	done := make(chan error, 1)
	u.sending.Add(1)
	go func() {
		defer u.sending.Done()
		defer func() { <-u.slots }()
		part, err := send(u.ctx, p)
		if err == nil && (part.Number != p.Number || part.ETag == "") {
			err = fmt.Errorf("part %d sent as part %d with ETag %q", p.Number, part.Number, part.ETag)
		}
		if err != nil {
			u.f.log.Warn("upload of a part failed", "path", u.entry.Path(), "part", p.Number, "err", err)
			u.fail(err)
			done <- u.failed() // the upload's first failure: the others follow from it
			return
		}
		u.mu.Lock()
		u.parts = append(u.parts, part)
		u.mu.Unlock()
		if p.sentHTTP {
			path = httpPath
		}
		u.f.m.WriteBytes.WithLabelValues(path).Add(float64(partSize))
		done <- nil
	}()
	return done, nil
}

// retry runs a request as retryWrite does, until the upload fails.
func (u *Upload) retry(op func(context.Context) error) error {
	return u.f.retryWrite(u.ctx, op)
}

// retryWrite runs a write request, and again after a transient failure, up
// to the mount's retries with Backoff between, until ctx ends.
func (f *FS) retryWrite(ctx context.Context, op func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || attempt > f.cfg.Retries || !objstore.IsRetryableWrite(err) || ctx.Err() != nil {
			return err
		}
		f.m.UploadPartRetries.Inc()
		t := time.NewTimer(objstore.Backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// Finish ends the upload: it sends what is left and completes the object,
// or, if anything failed, aborts it so that nothing is left behind. Every
// call after the first returns the first one's result.
func (u *Upload) Finish() error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	if u.finished {
		return u.result
	}
	u.finished = true
	var err error
	if u.extend > u.size && u.failed() == nil {
		err = u.pad()
	}
	var v objstore.Version
	if err == nil {
		v, err = u.finish()
	} else if u.uploadID != "" {
		u.sending.Wait()
		u.abort()
	}
	u.cancel()
	release(u.cur)
	u.cur, u.curLen = nil, 0
	u.f.m.UploadsInFlight.Dec()
	if err != nil {
		u.f.log.Warn("upload failed: the file was not written, nothing of it is visible",
			"path", u.entry.Path(), "bytes", u.size, "err", err)
		u.f.m.UploadsDone.WithLabelValues("aborted").Inc()
		u.result = fmt.Errorf("%s: %w: %v", u.entry.Path(), ErrUpload, err)
		u.f.uploadEnded(u, Entry{}, false)
		return u.result
	}
	u.f.m.UploadsDone.WithLabelValues("completed").Inc()
	u.mu.Lock()
	u.name.Version = v
	e := u.name
	u.mu.Unlock()
	u.f.uploadEnded(u, e, true)
	return nil
}

// pad writes zeros from the end of what was written to the size Truncate set.
func (u *Upload) pad() error {
	zeros := make([]byte, min(u.extend-u.size, 1<<20))
	for u.size < u.extend {
		if _, err := u.write(u.ctx, zeros[:min(u.extend-u.size, int64(len(zeros)))]); err != nil {
			return err
		}
	}
	return nil
}

func (u *Upload) finish() (objstore.Version, error) {
	b, k := u.entry.Bucket, u.entry.Key
	final := u.Entry()
	if u.uploadID == "" {
		if err := u.failed(); err != nil {
			return objstore.Version{}, err
		}
		// One PUT, under the name the file has now.
		var v objstore.Version
		err := u.retry(func(ctx context.Context) (err error) {
			v, err = u.up.PutObject(ctx, b, final.Key, views(u.cur))
			return err
		})
		if err != nil {
			return v, err
		}
		return u.version(final, v), nil
	}
	var err error
	if u.curLen > 0 && u.failed() == nil {
		err = u.sendPart(context.Background())
	}
	u.sending.Wait()
	if ferr := u.failed(); ferr != nil {
		err = ferr
	}
	var v objstore.Version
	if err == nil {
		u.mu.Lock()
		parts := append([]objstore.CompletedPart(nil), u.parts...)
		u.mu.Unlock()
		sort.Slice(parts, func(i, j int) bool { return parts[i].Number < parts[j].Number })
		err = u.retry(func(ctx context.Context) (err error) {
			v, err = u.up.CompleteMultipart(ctx, b, k, u.uploadID, parts)
			return err
		})
	}
	if err != nil {
		u.abort()
		return v, err
	}
	u.f.w.journal.end(u.uploadID)
	if final.Key != k {
		if err := u.moveTo(final, v.ETag); err != nil {
			return v, err
		}
	}
	return u.version(final, v), nil
}

// moveTo copies the completed object (etag) to the name a rename gave the
// file while it was written, and deletes it under the name it was uploaded
// as. When the copy fails, the upload's object is deleted too: nothing is
// left.
func (u *Upload) moveTo(final Entry, etag string) error {
	b, k := u.entry.Bucket, u.entry.Key
	err := u.f.copyObject(u.ctx, b, k, final.Key, u.size, etag)
	derr := u.retry(func(ctx context.Context) error { return u.up.DeleteObject(ctx, b, k) })
	if err != nil {
		return fmt.Errorf("rename to %s: %w", final.Path(), err)
	}
	if derr != nil {
		u.f.log.Warn("the file renamed while written was copied to its name, but the object it was uploaded as could not be deleted: both exist",
			"uploaded_as", u.entry.Path(), "name", final.Path(), "err", derr)
	}
	u.f.Forget(b, k)
	return nil
}

// abort drops the multipart upload, as abortMultipart does.
func (u *Upload) abort() { u.f.abortMultipart(u.entry.Bucket, u.entry.Key, u.uploadID) }

// abortMultipart drops a multipart upload of this daemon's, trying as
// often as a part would be tried, whatever ended the request that failed;
// one it cannot drop stays in the journal for the next start.
func (f *FS) abortMultipart(bucket, key, uploadID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	for attempt := 1; ; attempt++ {
		err = f.w.up.AbortMultipart(ctx, bucket, key, uploadID)
		if err == nil || errors.Is(err, objstore.ErrNoUpload) {
			f.w.journal.end(uploadID)
			return
		}
		if attempt > f.cfg.Retries || !objstore.IsRetryableWrite(err) || sleep(ctx, objstore.Backoff(attempt)) != nil {
			break
		}
	}
	f.log.Warn("could not abort a failed multipart upload: its parts stay on the server until the next start aborts it (--upload-journal) or a lifecycle rule does",
		"path", Entry{Bucket: bucket, Key: key}.Path(), "upload_id", uploadID, "err", err)
}

// version is the object as a HEAD sees it (the Last-Modified and the ETag
// later lookups and reads pin), or what the upload's reply said.
func (u *Upload) version(final Entry, v objstore.Version) objstore.Version {
	v.Size = u.size
	ctx, cancel := context.WithTimeout(context.Background(), u.f.cfg.ReadTimeout)
	defer cancel()
	if o, err := u.f.store.Stat(ctx, final.Bucket, final.Key); err == nil && o.Size == u.size {
		return o.Version
	}
	if v.LastModified.IsZero() {
		v.LastModified = time.Now()
	}
	return v
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func views(blocks []*cache.Block) [][]byte {
	out := make([][]byte, len(blocks))
	for i, b := range blocks {
		out[i] = b.Data
	}
	return out
}

func release(blocks []*cache.Block) {
	for _, b := range blocks {
		b.Release()
	}
}
