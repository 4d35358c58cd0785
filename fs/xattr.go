package fs

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
)

// Extended attributes the mount answers (docs/ioctl.md lists their JSON).
const (
	xattrCaps  = abi.XattrCaps
	xattrETag  = abi.XattrETag
	xattrStats = abi.XattrStats
)

// putXattr follows getxattr(2): an empty dest asks for the size.
func putXattr(dest []byte, value []byte) (uint32, syscall.Errno) {
	if len(dest) == 0 {
		return uint32(len(value)), 0
	}
	if len(dest) < len(value) {
		return uint32(len(value)), syscall.ERANGE
	}
	return uint32(copy(dest, value)), 0
}

func listXattrs(dest []byte, names ...string) (uint32, syscall.Errno) {
	var buf []byte
	for _, n := range names {
		buf = append(buf, n...)
		buf = append(buf, 0)
	}
	return putXattr(dest, buf)
}

func (d *dirNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !d.isRoot() {
		return 0, syscall.ENODATA
	}
	if attr == xattrCaps {
		return putXattr(dest, d.mount.caps())
	}
	if attr != xattrStats {
		return 0, syscall.ENODATA
	}
	snap, err := d.mount.m.Snapshot()
	if err != nil {
		return 0, syscall.EIO
	}
	snap["host"] = hostname
	b, _ := json.Marshal(snap)
	return putXattr(dest, b)
}

func (d *dirNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if !d.isRoot() {
		return listXattrs(dest)
	}
	return listXattrs(dest, xattrCaps, xattrStats)
}

func (d *dirNode) isRoot() bool { return d.EmbeddedInode().StableAttr().Ino == 1 }

func (f *fileNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	e := f.getEntry()
	switch attr {
	case xattrETag:
		if e.Version.ETag == "" {
			return 0, syscall.ENODATA
		}
		return putXattr(dest, []byte(e.Version.ETag))
	case xattrCaps:
		return putXattr(dest, f.mount.caps())
	case xattrStats:
		b, _ := json.Marshal(map[string]any{
			"bucket":        e.Bucket,
			"key":           e.Key,
			"size":          e.Version.Size,
			"etag":          e.Version.ETag,
			"last_modified": e.Version.LastModified,
			"version":       e.Version.ID(),
			// Whether opens of this version bypass the page cache
			// (the --direct-io policy).
			"direct_io": f.mount.core.DirectIO(e.Version.Size),
			"counters":  f.stats.snapshot(),
		})
		return putXattr(dest, b)
	}
	return 0, syscall.ENODATA
}

func (f *fileNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if f.getEntry().Version.ETag == "" {
		return listXattrs(dest, xattrCaps, xattrStats)
	}
	return listXattrs(dest, xattrCaps, xattrETag, xattrStats)
}

// fileStats counts what was read through one file since it was first
// looked up.
type fileStats struct {
	posixBytes, posixReads          atomic.Int64
	splicedBytes                    atomic.Int64
	gpuReads, gpuHTTPBytes, gpuRDMA atomic.Int64
	gpuDeclined, gpuDeclinedBytes   atomic.Int64
	gpuSharedBytes                  atomic.Int64
}

func (s *fileStats) posix(n int) {
	s.posixBytes.Add(int64(n))
	s.posixReads.Add(1)
}

// spliced counts a spliced reply (vfs.PipeReply) by the bytes the
// kernel took.
func (s *fileStats) spliced(n int) {
	s.posix(n)
	s.splicedBytes.Add(int64(n))
}

func (s *fileStats) gpu(r rdmaread.Result) {
	s.gpuReads.Add(1)
	s.gpuHTTPBytes.Add(r.HTTPBytes)
	s.gpuRDMA.Add(r.RDMABytes)
	s.gpuSharedBytes.Add(r.SharedBytes)
	if r.Decline != abi.DeclineNone {
		s.gpuDeclined.Add(1)
		s.gpuDeclinedBytes.Add(r.HTTPBytes)
	}
}

func (s *fileStats) snapshot() map[string]int64 {
	return map[string]int64{
		"posix_read_bytes":    s.posixBytes.Load(),
		"posix_reads":         s.posixReads.Load(),
		"posix_spliced_bytes": s.splicedBytes.Load(),
		"gpu_reads":           s.gpuReads.Load(),
		"gpu_http_bytes":      s.gpuHTTPBytes.Load(),
		"gpu_rdma_bytes":      s.gpuRDMA.Load(),
		"gpu_declined":        s.gpuDeclined.Load(),
		"gpu_declined_bytes":  s.gpuDeclinedBytes.Load(),
		"gpu_shared_bytes":    s.gpuSharedBytes.Load(),
	}
}
