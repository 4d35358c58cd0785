package fs

import (
	"context"
	"encoding/json"
	"syscall"
)

// Extended attributes the mount answers (docs/ioctl.md lists their JSON).
const (
	xattrETag  = "user.s3gdsfs.etag"
	xattrStats = "user.s3gdsfs.stats"
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
	if attr != xattrStats || !d.isRoot() {
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
	return listXattrs(dest, xattrStats)
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
	case xattrStats:
		b, _ := json.Marshal(map[string]any{
			"bucket":        e.Bucket,
			"key":           e.Key,
			"size":          e.Version.Size,
			"etag":          e.Version.ETag,
			"last_modified": e.Version.LastModified,
			"version":       e.Version.ID(),
		})
		return putXattr(dest, b)
	}
	return 0, syscall.ENODATA
}

func (f *fileNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return listXattrs(dest, xattrETag, xattrStats)
}
