package rdmaread

import (
	"context"
	"errors"
	"fmt"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// WriteRequest is one GPU write: Length bytes of the caller's buffer from
// SrcOffset, appended to a file at Offset.
type WriteRequest struct {
	Offset    int64 // where in the file the bytes go: the end of what was written
	Length    int64
	Device    int
	Handle    cufile.Handle // CUDA IPC handle of the allocation's base
	SrcOffset uint64        // where in the allocation the bytes are
	Flags     abi.Flags     // RDMA_ONLY, HTTP_ONLY, DECLINE_IS_ERROR
	Owner     int           // the caller's process, which holds the import
	UID       uint32        // the caller's user: the host stand-in reads only its files
}

// WriteSink is the file a GPU write appends to: a file being uploaded in
// parts (vfs.Upload, through the FUSE adapter).
type WriteSink interface {
	// PartSize is the size of the file's parts: every part but the last
	// is whole and starts at a multiple of it. 0: the file takes no
	// whole parts from the engine.
	PartSize() int64
	// Append takes bytes at the end of the file, as write(2) does: they
	// go into the upload's own part buffers, over HTTP.
	Append(p []byte) (int, error)
	// AppendPart reserves the next whole part at the end of the file (a
	// multiple of PartSize) for send, which runs in the background within
	// the upload's parts in flight. The channel receives send's error, or
	// nil once the part is stored. A failed send fails the file.
	AppendPart(ctx context.Context, send PartSender) (<-chan error, error)
}

// PartSender carries one whole part of a file: as an RDMA UploadPart, or
// through host.SendHTTP when that is declined.
type PartSender func(ctx context.Context, t objstore.PartTarget, host HostPart) (objstore.CompletedPart, error)

// HostPart sends a part over HTTP from host memory the file's upload
// lends: fill puts the part's bytes into bufs, in order.
type HostPart interface {
	SendHTTP(ctx context.Context, fill func(bufs [][]byte) error) (objstore.CompletedPart, error)
}

// WriteResult says how a GPU write's bytes went.
type WriteResult struct {
	Bytes     int64 // the file took
	RDMABytes int64 // of them, whole parts the server read over RDMA
	HTTPBytes int64 // of them, copied to pinned staging and uploaded over HTTP
	Decline   abi.Decline
	Transport abi.Transport
}

// wantsRDMAWrite says whether a write sends whole parts over RDMA: the
// daemon mints tokens and has a store that takes RDMA UploadParts.
func (e *Engine) wantsRDMAWrite(r WriteRequest) bool {
	return r.Flags&abi.FlagHTTPOnly == 0 && e.rdma != nil && e.rdma.tokens != nil && e.rdma.putter != nil
}

// Write appends the request's range of the caller's buffer to sink. With
// RDMA on, every whole part of the file the range covers goes as an RDMA
// UploadPart straight from the buffer, up to the file's parts in flight at
// once, and a declined part is copied through pinned staging and sent
// over HTTP instead (or fails the write, under RDMA_ONLY or
// DECLINE_IS_ERROR); the bytes before the first whole part and after the
// last go through pinned staging into the file's own parts. Write returns
// once every part it started has been stored or has failed: the caller may
// reuse its buffer then. sink's errors are returned as sink made them
// (SinkError), after the bytes it took.
func (e *Engine) Write(ctx context.Context, r WriteRequest, sink WriteSink) (WriteResult, error) {
	if r.Length < 0 || r.Offset < 0 {
		return WriteResult{}, fmt.Errorf("%w: negative offset or length", abi.ErrInvalid)
	}
	rdma := e.wantsRDMAWrite(r)
	if r.Flags&abi.FlagRDMAOnly != 0 && !rdma {
		e.m.GPUWriteDeclined.WithLabelValues(abi.DeclineRDMAUnavailable.String()).Inc()
		return WriteResult{Decline: abi.DeclineRDMAUnavailable}, ErrNoRDMA
	}
	alloc, err := e.imports.AcquireAs(r.Owner, r.UID, r.Device, r.Handle)
	if err != nil {
		return WriteResult{}, err
	}
	defer e.imports.Put(alloc)
	if r.SrcOffset > alloc.Size() || uint64(r.Length) > alloc.Size()-r.SrcOffset {
		return WriteResult{}, fmt.Errorf("%w: %d bytes at offset %d of a %d-byte allocation", mint.ErrOutOfBounds, r.Length, r.SrcOffset, alloc.Size())
	}
	if r.Length == 0 {
		return WriteResult{}, nil
	}
	head, parts, size := r.Length, int64(0), sink.PartSize()
	if rdma && size > 0 && size <= rdmatoken.MaxServerOp {
		head = min((size-r.Offset%size)%size, r.Length)
		parts = (r.Length - head) / size
	}
	var res WriteResult
	staged := func(off, n int64) error {
		k, err := e.copyOut(ctx, r.Device, alloc, r.SrcOffset+uint64(off), n, sink.Append)
		res.Bytes += k
		res.HTTPBytes += k
		return err
	}
	if err := staged(0, head); err != nil || parts == 0 {
		if err == nil && head < r.Length {
			err = staged(head, r.Length-head)
		}
		return e.writeResult(res, err)
	}
	// Whole parts: each result is read once its channel has spoken.
	results := make([]partResult, parts)
	var dones []<-chan error
	var err2 error
	for i := range parts {
		src := r.SrcOffset + uint64(head+i*size)
		done, err := sink.AppendPart(ctx, e.partSender(r, alloc, src, &results[i]))
		if err != nil {
			err2 = &sinkError{err}
			break
		}
		dones = append(dones, done)
	}
	var failed error
	for _, done := range dones {
		if err := <-done; err != nil && failed == nil {
			failed = err
		}
	}
	if failed != nil {
		// A part that failed failed the file: nothing of it will be
		// visible, so no byte of the call counts as taken.
		return e.writeResult(WriteResult{Decline: firstDecline(results[:len(dones)])}, failed)
	}
	for i := range dones {
		res.Bytes += size
		res.RDMABytes += results[i].rdma
		res.HTTPBytes += results[i].http
		if res.Decline == abi.DeclineNone {
			res.Decline = results[i].decline
		}
	}
	failed = err2
	if failed == nil {
		if tail := r.Length - head - parts*size; tail > 0 {
			failed = staged(head+parts*size, tail)
		}
	}
	return e.writeResult(res, failed)
}

func firstDecline(results []partResult) abi.Decline {
	for _, r := range results {
		if r.decline != abi.DeclineNone {
			return r.decline
		}
	}
	return abi.DeclineNone
}

// writeResult names a write's transport from how its bytes went.
func (e *Engine) writeResult(res WriteResult, err error) (WriteResult, error) {
	res.Transport = abi.TransportNone
	switch {
	case res.HTTPBytes > 0:
		res.Transport = abi.TransportHTTP
	case res.RDMABytes > 0:
		res.Transport = abi.TransportRDMA
	}
	return res, err
}

// partSender carries one whole part of a write from src of the buffer: an
// RDMA UploadPart with a token minted for it, and when that is declined,
// a copy through pinned staging sent over HTTP (unless declines are
// errors). out says how it went, once the part's channel has spoken.
func (e *Engine) partSender(r WriteRequest, alloc cufile.Allocation, src uint64, out *partResult) PartSender {
	return func(ctx context.Context, t objstore.PartTarget, host HostPart) (objstore.CompletedPart, error) {
		rep, err := e.putPart(ctx, r, alloc, src, t)
		if isObjectAnswer(err) || errors.Is(err, objstore.ErrNoUpload) || ctx.Err() != nil {
			if err == nil || !(isObjectAnswer(err) || errors.Is(err, objstore.ErrNoUpload)) {
				err = ctx.Err()
			}
			return objstore.CompletedPart{}, err
		}
		decline := DeclineFor(objstore.RDMAReply{Outcome: rep.Outcome, Bytes: rep.Bytes}, err)
		if decline == abi.DeclineNone {
			out.rdma = t.Size
			return objstore.CompletedPart{Number: t.Number, ETag: rep.ETag}, nil
		}
		out.decline = decline
		e.m.GPUWriteDeclined.WithLabelValues(decline.String()).Inc()
		e.log.Debug("RDMA part declined", "bucket", t.Bucket, "key", t.Key, "part", t.Number, "length", t.Size,
			"reason", decline.String(), "cause", err)
		if e.rdma.declineIsError || r.Flags&(abi.FlagDeclineIsError|abi.FlagRDMAOnly) != 0 {
			return objstore.CompletedPart{}, fmt.Errorf("%w: %s", ErrDeclined, decline)
		}
		// A declined part may have stored other bytes under its number
		// (an empty body, a short one): sending it again replaces them.
		part, err := host.SendHTTP(ctx, func(bufs [][]byte) error {
			return e.copyOutTo(ctx, r.Device, alloc, src, bufs)
		})
		if err != nil {
			return part, err
		}
		out.http = t.Size
		e.m.GPUWriteDeclinedBytes.WithLabelValues(decline.String()).Add(float64(t.Size))
		return part, nil
	}
}

// putPart sends one RDMA UploadPart of the part's bytes at src, within the
// read timeout: a server that holds the reply past it is given up.
func (e *Engine) putPart(ctx context.Context, r WriteRequest, alloc cufile.Allocation, src uint64, t objstore.PartTarget) (objstore.RDMAPutReply, error) {
	lease, err := e.rdma.tokens.Acquire(alloc, src, uint64(t.Size))
	if err != nil {
		return objstore.RDMAPutReply{}, err
	}
	defer lease.Release()
	token, err := lease.Token()
	if err != nil {
		return objstore.RDMAPutReply{}, err
	}
	done, err := e.sched.Acquire(ctx, r.Owner, t.Size)
	if err != nil {
		return objstore.RDMAPutReply{}, err
	}
	defer done()
	tctx, cancel := context.WithTimeout(ctx, e.cfg.ReadTimeout)
	defer cancel()
	rep, err := e.rdma.putter.UploadPartRDMA(tctx, t, token)
	if err != nil && tctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("RDMA UploadPart took over %s: %w", e.cfg.ReadTimeout, context.DeadlineExceeded)
	}
	if d := DeclineFor(objstore.RDMAReply{Outcome: rep.Outcome}, err); d == abi.DeclineRDMAError || d == abi.DeclineTimeout {
		lease.ReportFailure(token)
	}
	return rep, err
}

// copyOutTo copies the buffer's bytes at src into bufs, filling each in
// order, through pinned staging.
func (e *Engine) copyOutTo(ctx context.Context, device int, alloc cufile.Allocation, src uint64, bufs [][]byte) error {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	i, at := 0, 0
	_, err := e.copyOut(ctx, device, alloc, src, n, func(p []byte) (int, error) {
		took := 0
		for took < len(p) {
			if at == len(bufs[i]) {
				i, at = i+1, 0
				continue
			}
			k := copy(bufs[i][at:], p[took:])
			at += k
			took += k
		}
		return took, nil
	})
	return err
}

// copyOut copies n bytes of alloc from src device to host into pinned
// slots of the device's ring, one slot at a time, and hands each slot's
// bytes to sink in order; the copy of the next slot runs while sink takes
// the last. It returns how many bytes sink took. sink's error is returned
// as a sinkError, after the bytes it took; the error of a copy stops the
// write before its bytes reach sink.
func (e *Engine) copyOut(ctx context.Context, device int, alloc cufile.Allocation, src uint64, n int64, sink func([]byte) (int, error)) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	stager, err := e.stager(device)
	if err != nil {
		return 0, err
	}
	copier, err := stager.NewCopier()
	if err != nil {
		return 0, err
	}
	var held []*cufile.Slot
	defer func() {
		// Close waits for a copy still under way before its slot goes back.
		copier.Close()
		for _, s := range held {
			copier.ReleaseSlot(s)
		}
	}()
	// fill takes a slot and enqueues the copy of the range's bytes at off
	// into it. Without wait it takes only a slot free now, or none (nil): a
	// ring of one slot, or one the reads hold, must not keep a write that
	// holds a slot waiting for another.
	fill := func(off int64, wait bool) (*cufile.Slot, int, error) {
		var slot *cufile.Slot
		if wait {
			var err error
			if slot, err = copier.AcquireSlot(ctx); err != nil {
				return nil, 0, err
			}
		} else if slot = stager.TryAcquireSlot(); slot == nil {
			return nil, 0, nil
		}
		held = append(held, slot)
		k := int(min(int64(len(slot.Buf)), n-off))
		return slot, k, copier.CopyFromDeviceAsync(alloc, src+uint64(off), slot, k)
	}
	var done int64
	slot, k, err := fill(0, true)
	for err == nil {
		if err = copier.Sync(); err != nil {
			break
		}
		cur, ck := slot, k
		slot = nil
		if next := done + int64(ck); next < n {
			// The device copies the next slot while sink takes this one.
			slot, k, err = fill(next, false)
		}
		took, serr := sink(cur.Buf[:ck])
		done += int64(took)
		held = dropSlot(held, cur)
		copier.ReleaseSlot(cur)
		if serr != nil {
			return done, &sinkError{serr}
		}
		if took < ck {
			return done, &sinkError{errors.New("the writer took fewer bytes than given")}
		}
		if done == n {
			break
		}
		if err == nil && slot == nil {
			slot, k, err = fill(done, true)
		}
	}
	return done, err
}

// sinkError is the error of a write's sink, returned as the sink made it.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

// SinkError returns the error a write's sink made, if err is one.
func SinkError(err error) (error, bool) {
	var s *sinkError
	if errors.As(err, &s) {
		return s.err, true
	}
	return nil, false
}

func dropSlot(held []*cufile.Slot, s *cufile.Slot) []*cufile.Slot {
	for i, h := range held {
		if h == s {
			return append(held[:i], held[i+1:]...)
		}
	}
	return held
}
