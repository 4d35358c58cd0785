// Package callers keeps the processes that read a mount's open files into
// GPU memory: it turns a read ioctl into a request of the GPU read engine,
// owned by the caller's process, answers it with the errno the ioctl
// returns, and releases a process's imports when its last file closes or it
// exits.
package callers

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
)

// Engine is what the table needs of the GPU read engine (*rdmaread.Engine).
type Engine interface {
	// Backend is the CUDA layer the engine writes through.
	Backend() cufile.Backend
	// Read places a request's range into the caller's buffer.
	Read(ctx context.Context, r rdmaread.Request) (rdmaread.Result, error)
	// Write appends a request's range of the caller's buffer to sink.
	Write(ctx context.Context, r rdmaread.WriteRequest, sink rdmaread.WriteSink) (rdmaread.WriteResult, error)
	// ReleaseOwner closes a caller's imports.
	ReleaseOwner(owner int)
	// Reap closes the imports of callers whose process has exited.
	Reap()
}

var _ Engine = (*rdmaread.Engine)(nil)

// Table holds the processes that read a mount's open files into GPU
// memory, and the files each read through. The engine imports a caller's
// buffers per process; they are closed when the last file through which the
// process read is released, or when it exits without releasing them (Reap),
// so a killed reader never leaves the daemon holding memory its exporter
// freed. A file is whatever the caller's layer names an open file by (a
// comparable value, such as a pointer to its handle). Each file read through
// has its GPU readahead state (rdmaread.Ahead), dropped when the file
// closes or a process that read through it exits.
type Table struct {
	engine Engine

	mu     sync.Mutex
	files  map[int]map[any]struct{} // process id -> the open files it read through
	tgids  map[int]int              // thread id -> process id
	aheads map[any]*rdmaread.Ahead  // open file -> its readahead
}

// New keeps the callers of the engine's reads.
func New(e Engine) *Table {
	return &Table{engine: e, files: map[int]map[any]struct{}{}, tgids: map[int]int{}, aheads: map[any]*rdmaread.Ahead{}}
}

// Errors of a request the engine's backend cannot take.
var (
	errHostBuffers = errno.New(syscall.EOPNOTSUPP, "host buffers are off: the daemon was not started with the host stand-in")
	errHostHandle  = errno.New(syscall.EINVAL, "the host stand-in takes host buffers, not device handles")
)

// Read serves one GPU read of file, issued by the thread tid of user uid
// (the caller FUSE names), into the object version the file pinned at
// open. Its error carries the errno the read ioctl answers (docs/ioctl.md).
func (c *Table) Read(ctx context.Context, file any, tid int, uid uint32, req abi.ReadRequest, bucket, key string, v objstore.Version) (rdmaread.Result, error) {
	standin := c.engine.Backend().Name() == abi.CUDABackendHostStandin
	tokenOnly := req.IPCHandle == [abi.IPCHandleLen]byte{} && req.Token() != ""
	if hb := req.Flags&abi.FlagHostBuffer != 0; hb != standin && !tokenOnly {
		if hb {
			// Host buffers are a test aid, off unless the daemon was started with them.
			return rdmaread.Result{}, errHostBuffers
		}
		return rdmaread.Result{}, errHostHandle
	}
	owner := c.tgid(tid)
	ahead := c.add(owner, file)
	res, err := c.engine.Read(ctx, rdmaread.Request{
		Bucket: bucket, Key: key, Version: v,
		// Offsets of 2^62 and more are past any object's end (2^63 and
		// more would be negative): the read is short, of 0 bytes.
		Offset: int64(min(req.Offset, 1<<62)), Length: int64(min(req.Length, 1<<62)),
		Device: int(req.Device), Handle: cufile.Handle(req.IPCHandle),
		DstOffset: req.DstOffset, Flags: req.Flags, Owner: owner, UID: uid, Token: req.Token(),
		Ahead: ahead,
	})
	return res, rdmaread.IoctlError(err)
}

// Write serves one GPU write of file, issued by the thread tid of user uid:
// req.Length bytes of the caller's buffer at req.DstOffset are appended to
// sink at req.Offset, whole parts over RDMA where the engine can
// (rdmaread.Engine.Write). It returns how the bytes went; sink's error is
// returned as sink made it (it carries the errno of the file's write), the
// others with the errno the write ioctl answers.
func (c *Table) Write(ctx context.Context, file any, tid int, uid uint32, req abi.ReadRequest, sink rdmaread.WriteSink) (rdmaread.WriteResult, error) {
	standin := c.engine.Backend().Name() == abi.CUDABackendHostStandin
	if hb := req.Flags&abi.FlagHostBuffer != 0; hb != standin {
		if hb {
			return rdmaread.WriteResult{}, errHostBuffers
		}
		return rdmaread.WriteResult{}, errHostHandle
	}
	owner := c.tgid(tid)
	c.add(owner, file)
	res, err := c.engine.Write(ctx, rdmaread.WriteRequest{
		Offset: int64(min(req.Offset, 1<<62)), Length: int64(min(req.Length, 1<<62)),
		Device: int(req.Device), Handle: cufile.Handle(req.IPCHandle),
		SrcOffset: req.DstOffset, Flags: req.Flags, Owner: owner, UID: uid,
	}, sink)
	if serr, ok := rdmaread.SinkError(err); ok {
		return res, serr
	}
	return res, rdmaread.IoctlError(err)
}

// tgid maps the thread FUSE names onto its process: imports belong to the
// process, whichever of its threads asked.
func (c *Table) tgid(tid int) int {
	c.mu.Lock()
	if p, ok := c.tgids[tid]; ok {
		c.mu.Unlock()
		return p
	}
	c.mu.Unlock()
	p := tid
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					p = n
				}
				break
			}
		}
	}
	c.mu.Lock()
	if len(c.tgids) > 1<<16 { // threads come and go: keep the map small
		clear(c.tgids)
	}
	c.tgids[tid] = p
	c.mu.Unlock()
	return p
}

// add notes that tgid reads through file and returns the file's readahead.
func (c *Table) add(tgid int, file any) *rdmaread.Ahead {
	c.mu.Lock()
	defer c.mu.Unlock()
	set, ok := c.files[tgid]
	if !ok {
		set = map[any]struct{}{}
		c.files[tgid] = set
	}
	set[file] = struct{}{}
	a, ok := c.aheads[file]
	if !ok {
		a = rdmaread.NewAhead()
		c.aheads[file] = a
	}
	return a
}

// Released is called when file closes; callers left with no open file lose
// their imports. The table may be nil (no GPU reads).
func (c *Table) Released(file any) {
	if c == nil {
		return
	}
	var gone []int
	c.mu.Lock()
	ahead := c.aheads[file]
	delete(c.aheads, file)
	for tgid, set := range c.files {
		if _, ok := set[file]; !ok {
			continue
		}
		delete(set, file)
		if len(set) == 0 {
			delete(c.files, tgid)
			gone = append(gone, tgid)
		}
	}
	c.mu.Unlock()
	ahead.Close()
	for _, tgid := range gone {
		c.engine.ReleaseOwner(tgid)
	}
}

// Reap closes the imports of callers that exited without closing their
// files (killed), every interval until ctx ends.
func (c *Table) Reap(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.reap()
	}
}

// reap forgets the callers that have exited and drops the readahead of
// the files they read through (a file another process shares reads
// ahead again once read in order), then closes their imports.
func (c *Table) reap() {
	var drop []*rdmaread.Ahead
	c.mu.Lock()
	for tgid, set := range c.files {
		if !cufile.ProcessAlive(tgid) {
			for file := range set {
				if a := c.aheads[file]; a != nil {
					drop = append(drop, a)
				}
			}
			delete(c.files, tgid)
		}
	}
	clear(c.tgids)
	c.mu.Unlock()
	for _, a := range drop {
		a.Drop()
	}
	c.engine.Reap()
}
