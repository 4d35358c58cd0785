package fs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// READ reply times (s3gdsfs_fuse_read_replies_total and
// s3gdsfs_fuse_read_reply_seconds_total, docs/metrics.md): from go-fuse's
// call of rawFS.Read to the end of the reply's write, which go-fuse marks
// by calling the result's Done as the write returns (for a spliced reply,
// once the kernel has moved its bytes on). A failed read's reply is only a
// header, written right after Read returns: its time ends there.

// timeReply counts the READ that started at start and returns its
// result, wrapped to note when its reply has been written.
func (r *rawFS) timeReply(start time.Time, res fuse.ReadResult, st fuse.Status) (fuse.ReadResult, fuse.Status) {
	if !st.Ok() || res == nil {
		r.noteReply(start)
		return res, st
	}
	t := timedResult{ReadResult: res, fs: r, start: start}
	switch res.(type) {
	case interface{ Seekable() (uintptr, int64, int) }, interface{ SpliceFlags() int }:
		// Results the adapter does not make: a wrapper would hide
		// how go-fuse is to splice them, so their time ends here.
		r.noteReply(start)
		return res, st
	case sliced:
		return timedSlices{t}, st
	case stateful:
		return timedStateful{t}, st
	}
	return t, st
}

func (r *rawFS) noteReply(start time.Time) {
	r.m.FuseReadReplies.Inc()
	r.m.FuseReadReplySeconds.Add(time.Since(start).Seconds())
}

// The shapes go-fuse writes a result by (fuse/read.go): vectored from
// memory (blockResult), or spliced from a pipe (pipeResult); any other is
// copied out with Bytes (fuse.ReadResultData).
type sliced interface {
	Slices() ([][]byte, fuse.Status)
}

type stateful interface {
	Stateful() (uintptr, int)
}

// timedResult is a READ result that notes its reply's time when go-fuse
// is done with it.
type timedResult struct {
	fuse.ReadResult
	fs    *rawFS
	start time.Time
}

func (t timedResult) Done() {
	t.fs.noteReply(t.start)
	t.ReadResult.Done()
}

type timedSlices struct{ timedResult }

func (t timedSlices) Slices() ([][]byte, fuse.Status) { return t.ReadResult.(sliced).Slices() }

type timedStateful struct{ timedResult }

func (t timedStateful) Stateful() (uintptr, int) { return t.ReadResult.(stateful).Stateful() }
