package fs

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// The write side (--allow-writes) as FUSE asks for it: each request
// becomes one call on the core (vfs/write.go, vfs/upload.go), which
// decides everything about S3. A mount without writes is mounted
// read-only, so the kernel answers EROFS before any of this is reached.

var (
	_ gofs.NodeCreater   = (*dirNode)(nil)
	_ gofs.NodeMkdirer   = (*dirNode)(nil)
	_ gofs.NodeRmdirer   = (*dirNode)(nil)
	_ gofs.NodeUnlinker  = (*dirNode)(nil)
	_ gofs.NodeRenamer   = (*dirNode)(nil)
	_ gofs.NodeSetattrer = (*dirNode)(nil)
	_ gofs.NodeSetattrer = (*fileNode)(nil)

	_ gofs.FileWriter   = (*writeHandle)(nil)
	_ gofs.FileReader   = (*writeHandle)(nil)
	_ gofs.FileFlusher  = (*writeHandle)(nil)
	_ gofs.FileFsyncer  = (*writeHandle)(nil)
	_ gofs.FileReleaser = (*writeHandle)(nil)
)

func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	u, err := d.mount.core.Create(ctx, d.entry, name)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	e := u.Entry()
	f := &fileNode{mount: d.mount, entry: e, w: u}
	f.fillAttr(&out.Attr)
	inode := d.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: e.Ino()})
	h := f.newWriteHandle(ctx, u)
	f.wtgid = h.tgid
	return inode, h, fuse.FOPEN_DIRECT_IO, 0
}

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	e, err := d.mount.core.Mkdir(ctx, d.entry, name)
	if err != nil {
		return nil, errno(err)
	}
	d.mount.fillDirAttr(&out.Attr)
	return d.NewInode(ctx, &dirNode{mount: d.mount, entry: e}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: e.Ino()}), 0
}

func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return errno(d.mount.core.Rmdir(ctx, d.entry, name))
}

func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return errno(d.mount.core.Unlink(ctx, d.entry, name))
}

func (d *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	const renameNoReplace = 1 // RENAME_NOREPLACE
	if flags&^renameNoReplace != 0 {
		return errno(vfs.ErrRenameFlags)
	}
	dst, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	src, err := d.mount.core.Lookup(ctx, d.entry, name)
	if err != nil {
		return errno(err)
	}
	e, err := d.mount.core.Rename(ctx, src, dst.entry, newName, flags&renameNoReplace != 0)
	if err != nil {
		return errno(err)
	}
	// go-fuse moves the inode to its new name once this returns.
	if child := d.GetChild(name); child != nil {
		if n, ok := child.Operations().(*fileNode); ok {
			n.setEntry(e)
		}
	}
	return 0
}

// Setattr on a directory takes modes, owners and times and keeps none:
// S3 stores none of them for a prefix.
func (d *dirNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !d.mount.core.Writable() {
		return syscall.EROFS
	}
	d.mount.fillDirAttr(&out.Attr)
	return 0
}

// Setattr on a file: a size change only of a file being written, and
// never below what was written (vfs.Upload.Truncate); modes, owners and times are taken and not kept, as S3 stores none
// of them, so that tools that set them after writing (cp -p, shutil.copy2)
// do not fail.
func (f *fileNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !f.mount.core.Writable() {
		return syscall.EROFS
	}
	if size, ok := in.GetSize(); ok {
		w := f.writer()
		if w == nil {
			// Truncating an object outside an open would replace it.
			return errno(vfs.ErrModify)
		}
		if err := w.Truncate(int64(size)); err != nil {
			return errno(err)
		}
	}
	f.fillAttr(&out.Attr)
	return 0
}

func (f *fileNode) writer() *vfs.Upload {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w
}

// openWrite is an open of an existing file for writing: it may only
// replace the object whole (O_TRUNC, with --allow-overwrite), or join the
// upload of the process writing it (joinWrite).
func (f *fileNode) openWrite(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if !f.mount.core.Writable() {
		return nil, 0, syscall.EROFS
	}
	if h := f.joinWrite(ctx); h != nil {
		return h, fuse.FOPEN_DIRECT_IO, 0
	}
	u, err := f.mount.core.OpenWrite(f.getEntry(), flags&syscall.O_TRUNC != 0)
	if err != nil {
		return nil, 0, errno(err)
	}
	h := f.newWriteHandle(ctx, u)
	f.mu.Lock()
	f.w, f.wtgid = u, h.tgid
	f.mu.Unlock()
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// joinWrite is a second open for writing, by the process writing the file
// before it has written a byte: it writes the same upload. kvikio opens a
// file it writes twice, the second time O_DIRECT for cuFile, and writes
// through POSIX instead when that open fails. O_TRUNC has nothing to
// truncate yet; the two descriptors share the upload as dup(2)'s copies do,
// so the process's first close ends it. Any other second writer is EBUSY.
func (f *fileNode) joinWrite(ctx context.Context) *writeHandle {
	f.mu.Lock()
	u, tgid := f.w, f.wtgid
	f.mu.Unlock()
	if u == nil || u.Size() != 0 || tgid == 0 || callerProcess(ctx) != tgid {
		return nil
	}
	return f.newWriteHandle(ctx, u)
}

// writeHandle is a file open for writing: every write goes to its upload.
type writeHandle struct {
	node *fileNode
	u    *vfs.Upload
	tgid int // the opening process: its close ends the upload (Flush)
}

func (f *fileNode) newWriteHandle(ctx context.Context, u *vfs.Upload) *writeHandle {
	h := &writeHandle{node: f, u: u, tgid: callerProcess(ctx)}
	f.mount.m.OpenHandles.Inc()
	return h
}

func (h *writeHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.u.Write(ctx, off, data)
	if err != nil {
		return uint32(n), errno(err)
	}
	return uint32(n), 0
}

// Read of a file being written is refused: its bytes are on their way to
// S3, and the object does not exist until the upload ends.
func (h *writeHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return nil, errno(vfs.ErrBusy)
}

// Flush is close(2): the opener's close ends the upload and answers its
// error. The close of a copy of the descriptor another process holds (a
// child that inherited it) does not, since the opener may still write.
func (h *writeHandle) Flush(ctx context.Context) syscall.Errno {
	if p := callerProcess(ctx); p != 0 && h.tgid != 0 && p != h.tgid {
		return 0
	}
	return h.finish()
}

// Fsync ends the upload too: the bytes are durable only once the object is.
// Writes after it fail (EBADF).
func (h *writeHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.finish()
}

func (h *writeHandle) Release(ctx context.Context) syscall.Errno {
	h.finish()
	h.node.mount.callers.Released(h) // the imports of its GPU writes
	h.node.mount.m.OpenHandles.Dec()
	return 0
}

func (h *writeHandle) finish() syscall.Errno {
	err := h.u.Finish()
	n := h.node
	n.mu.Lock()
	if n.w == h.u {
		n.w = nil
		if err == nil {
			n.entry = h.u.Entry()
		}
	}
	n.mu.Unlock()
	if err != nil {
		// Nothing was written: the kernel must forget the name it was
		// told of at create, or it shows the file until --meta-ttl ends.
		if name, parent := n.Parent(); parent != nil {
			parent.NotifyEntry(name)
		}
	}
	return errno(err)
}

// callerProcess is the process (thread group) of the request's caller, 0
// when unknown: FUSE names the calling thread, and a program may open a
// file on one thread and close it on another.
func callerProcess(ctx context.Context) int {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(c.Pid)) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// writeAttr fills what a file being written shows: the bytes written so far.
func writeAttr(a *fuse.Attr, u *vfs.Upload) {
	a.Size = uint64(u.Size())
	a.Blocks = (a.Size + 511) / 512
	now := time.Now()
	a.SetTimes(nil, &now, &now)
}
