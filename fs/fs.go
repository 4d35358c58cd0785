// Package fs adapts the vfs core to go-fuse. It stays thin: it translates
// each FUSE request into a call on the core (or, for the read ioctl, on the
// GPU engine), and its answer into FUSE's, errors through the one errno
// mapping (errno.go); attributes and extended attributes are presentation.
// How a file is read, and every decision about S3, lives in vfs.
package fs

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/callers"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// Options are the mount's presentation settings.
type Options struct {
	UID, GID   uint32
	FileMode   uint32 // permission bits of files, e.g. 0444
	DirMode    uint32 // permission bits of directories, e.g. 0555
	AllowOther bool   // let users other than the mounting one in (docs/operations.md)
	FsName     string // shown in /proc/mounts
	Debug      bool   // log every FUSE request
	// PollRequests is how long a thread that has just replied, or that no
	// other thread polls beside, polls /dev/fuse for the next FUSE request
	// before it sleeps; other threads poll a twentieth of it (0: they
	// sleep at once).
	// Waking a sleeping thread for every request is what a direct-I/O
	// reader's requests cost most on a virtual machine
	// (docs/architecture.md, "Request cost").
	PollRequests time.Duration
	// MaxRead is the largest READ the kernel is asked to send (and the
	// largest WRITE it may): above 1 MiB only where the kernel's
	// fs.fuse.max_pages_limit allows it (the daemon raises it as root).
	// Fewer, larger requests cost a direct-I/O reader fewer round trips.
	// 0: DefaultMaxRead.
	MaxRead int
}

// mount is state shared by every node of one mount.
type mount struct {
	core    *vfs.FS
	gpu     *rdmaread.Engine // nil when GPU reads are off
	callers *callers.Table   // the processes reading into GPU memory; nil without GPU reads
	m       *metrics.Set
	opts    Options
	started time.Time
}

// DefaultMaxRead is what a mount that sets no MaxRead asks for: the
// largest read FUSE sends on any kernel since 4.20 without raising
// fs.fuse.max_pages_limit.
const DefaultMaxRead = 1 << 20

// Mount serves core at mountpoint, and GPU reads through gpu (nil turns them
// off), until the returned server is unmounted. ctx ends background work.
func Mount(ctx context.Context, mountpoint string, core *vfs.FS, gpu *rdmaread.Engine, m *metrics.Set, opts Options) (*fuse.Server, error) {
	if opts.FileMode == 0 {
		opts.FileMode = 0o444
	}
	if opts.DirMode == 0 {
		opts.DirMode = 0o555
	}
	if opts.FsName == "" {
		opts.FsName = "s3gdsfs"
	}
	if opts.MaxRead == 0 {
		opts.MaxRead = DefaultMaxRead
	}
	// Without writes the mount is read-only, and the kernel answers every
	// write-side call EROFS itself. With them the owner may write (u+w),
	// and an open's O_TRUNC comes with the OPEN (ATOMIC_O_TRUNC) so that
	// an open that would modify an object is told from one that replaces it.
	mountOpts, caps := []string{"ro", "default_permissions"}, uint64(fuse.CAP_DIRECT_IO_ALLOW_MMAP)
	if core.Writable() {
		mountOpts[0] = "rw"
		caps |= fuse.CAP_ATOMIC_O_TRUNC
		opts.FileMode |= 0o200
		opts.DirMode |= 0o200
	}
	mt := &mount{core: core, gpu: gpu, m: m, opts: opts, started: time.Now()}
	if gpu != nil {
		mt.callers = callers.New(gpu)
		go mt.callers.Reap(ctx, 2*time.Second)
	}
	cfg := core.Config()
	entryTTL, negTTL := cfg.MetaTTL, cfg.NegativeTTL
	root := &dirNode{mount: mt, entry: core.Root()}
	fopts := &gofs.Options{
		MountOptions: fuse.MountOptions{
			FsName:       opts.FsName,
			Name:         "s3gdsfs",
			AllowOther:   opts.AllowOther,
			MaxWrite:     opts.MaxRead,
			MaxReadAhead: opts.MaxRead,
			// go-fuse's own lines go to the daemon's log: the requests it
			// prints for Debug at info, and otherwise (a read of /dev/fuse
			// that fails as the mount goes away) at debug.
			Logger: slog.NewLogLogger(core.Logger().Handler(), fuseLogLevel(opts.Debug)),
			// mmap of a file opened with direct I/O (kernel 6.6 and later;
			// older kernels refuse shared mappings of such files).
			ExtraCapabilities: caps,
			// More parallel reads from the kernel's readahead.
			MaxBackground: 64,
			// The kernel checks modes and ownership itself, so AllowOther
			// never lets a user read what the modes forbid.
			Options:     mountOpts,
			DirectMount: true,
			// Replies come from memory (one writev), or with --splice
			// from a pipe the socket's bytes were spliced into.
			DisableSplice: !cfg.Splice,
			PollRequests:  opts.PollRequests,
			Debug:         opts.Debug,
		},
		EntryTimeout:    &entryTTL,
		AttrTimeout:     &entryTTL,
		NegativeTimeout: &negTTL,
		UID:             opts.UID,
		GID:             opts.GID,
		RootStableAttr:  &gofs.StableAttr{Ino: 1, Mode: syscall.S_IFDIR},
	}
	// Only a kill interrupts a request (interrupt.go); READ replies are
	// timed (replies.go).
	return serve(mountpoint, root, fopts, m)
}

// dirNode is a bucket, a prefix, or the top of a mount of every bucket.
type dirNode struct {
	gofs.Inode
	mount *mount
	entry vfs.Entry
}

var (
	_ gofs.NodeLookuper    = (*dirNode)(nil)
	_ gofs.NodeReaddirer   = (*dirNode)(nil)
	_ gofs.NodeGetattrer   = (*dirNode)(nil)
	_ gofs.NodeStatfser    = (*dirNode)(nil)
	_ gofs.NodeGetxattrer  = (*dirNode)(nil)
	_ gofs.NodeListxattrer = (*dirNode)(nil)
)

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	e, err := d.mount.core.Lookup(ctx, d.entry, name)
	if err != nil {
		return nil, errno(err)
	}
	// The kernel may already know this name: go-fuse keeps the inode it
	// registered first, so refresh that one with what S3 says now.
	if known := d.GetChild(name); known != nil && known.StableAttr().Ino == e.Ino() {
		switch n := known.Operations().(type) {
		case *fileNode:
			n.setEntry(e)
			n.fillAttr(&out.Attr)
			return known, 0
		case *dirNode:
			d.mount.fillDirAttr(&out.Attr)
			return known, 0
		}
	}
	if e.Dir {
		d.mount.fillDirAttr(&out.Attr)
		return d.NewInode(ctx, &dirNode{mount: d.mount, entry: e}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: e.Ino()}), 0
	}
	f := &fileNode{mount: d.mount, entry: e}
	f.fillAttr(&out.Attr)
	return d.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: e.Ino()}), 0
}

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	// Directories made here and files being written show before the
	// listing, which does not hold them yet.
	s := &dirStream{r: d.mount.core.ReadDir(d.entry), buf: d.mount.core.Pending(d.entry)}
	for _, e := range s.buf {
		if s.pending == nil {
			s.pending = make(map[string]bool)
		}
		s.pending[e.Name] = true
	}
	return s, 0
}

func (d *dirNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.mount.fillDirAttr(&out.Attr)
	return 0
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	// An object store has no fixed capacity and nothing here is used up by
	// writing: report a large filesystem with nothing used and all of it
	// free (1 PiB and a billion inodes, as rclone does), so df reads 0%
	// and tools that check free space do not refuse to run.
	const size, files = 1 << 50, 1_000_000_000
	bs := uint64(d.mount.opts.MaxRead)
	out.Bsize = uint32(bs)
	out.Frsize = uint32(bs)
	out.Blocks = size / bs
	out.Bfree = out.Blocks
	out.Bavail = out.Blocks
	out.Files = files
	out.Ffree = files
	out.NameLen = 255
	return 0
}

func (m *mount) fillDirAttr(a *fuse.Attr) {
	a.Mode = syscall.S_IFDIR | m.opts.DirMode
	a.Nlink = 2
	a.Owner = fuse.Owner{Uid: m.opts.UID, Gid: m.opts.GID}
	// S3 keeps no time for a prefix: a directory's times are the mount's start.
	a.SetTimes(&m.started, &m.started, &m.started)
}

// fileNode is one object.
type fileNode struct {
	gofs.Inode
	mount *mount

	mu    sync.Mutex
	entry vfs.Entry
	stats fileStats
	w     *vfs.Upload // the upload writing the file, until it ends (write.go)
	wtgid int         // the process that opened w
}

var (
	_ gofs.NodeOpener      = (*fileNode)(nil)
	_ gofs.NodeGetattrer   = (*fileNode)(nil)
	_ gofs.NodeGetxattrer  = (*fileNode)(nil)
	_ gofs.NodeListxattrer = (*fileNode)(nil)
)

func (f *fileNode) setEntry(e vfs.Entry) {
	f.mu.Lock()
	f.entry = e
	f.mu.Unlock()
}

func (f *fileNode) getEntry() vfs.Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.entry
}

func (f *fileNode) fillAttr(a *fuse.Attr) {
	e := f.getEntry()
	a.Mode = syscall.S_IFREG | f.mount.opts.FileMode
	a.Nlink = 1
	a.Size = uint64(e.Version.Size)
	a.Blocks = (a.Size + 511) / 512
	// A large preferred I/O size makes cp, cat and Python read in big chunks.
	a.Blksize = uint32(f.mount.opts.MaxRead)
	a.Owner = fuse.Owner{Uid: f.mount.opts.UID, Gid: f.mount.opts.GID}
	mt := e.Version.LastModified
	a.SetTimes(&mt, &mt, &mt)
	if w := f.writer(); w != nil {
		writeAttr(a, w)
	}
}

// readErrno is the answer to a failed read of the file, POSIX or GPU
// (the read ioctl). A read that found the object replaced (ESTALE) drops
// what the daemon and the kernel cache about the file's name first, so
// that an open after the failed read sees the new version.
func (f *fileNode) readErrno(err error) syscall.Errno {
	en := errno(err)
	if en == syscall.ESTALE {
		f.replaced()
	}
	return en
}

// replaced drops the core's entry for the file's name (a POSIX read's
// blocks have done so already; a GPU read's engine has not) and the
// kernel's: the kernel would otherwise open the old version's inode again,
// with its size, and fail again, until the entry's TTL (--meta-ttl) ran
// out. The next open looks the name up and gets the new version's inode.
// The read waits for it, so that an open after the failed read already
// sees the new version.
func (f *fileNode) replaced() {
	e := f.getEntry()
	f.mount.core.Forget(e.Bucket, e.Key)
	name, parent := f.Parent()
	if parent == nil {
		return
	}
	if en := parent.NotifyEntry(name); en != 0 && en != syscall.ENOENT {
		f.mount.core.Logger().Warn("could not drop the kernel's entry of a replaced object", "name", name, "errno", en)
	}
}

func (f *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fillAttr(&out.Attr)
	return 0
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return f.openWrite(ctx, flags)
	}
	e := f.getEntry()
	if f.mount.core.Writing(e) != nil {
		return nil, 0, errno(vfs.ErrBusy)
	}
	h, err := f.mount.core.Open(e)
	if err != nil {
		return nil, 0, errno(err)
	}
	// The core chose the open's reads; direct I/O is the kernel's to know.
	// Otherwise the inode is this version of the object (a new version is
	// a new inode), so what the page cache holds for it stays right across
	// opens.
	fuseFlags := uint32(fuse.FOPEN_KEEP_CACHE)
	if h.DirectIO() {
		fuseFlags = fuse.FOPEN_DIRECT_IO
	}
	return &fileHandle{mount: f.mount, node: f, h: h}, fuseFlags, 0
}

// fileHandle is one open of a file.
type fileHandle struct {
	mount *mount
	node  *fileNode
	h     *vfs.Handle
}

var (
	_ gofs.FileFlagsReader = (*fileHandle)(nil)
	_ gofs.FileReleaser    = (*fileHandle)(nil)
)

// ReadWithFlags serves a read. The kernel marks a direct-I/O read(2)'s
// reads with READ_LOCKOWNER; the others come from the page cache (its
// readahead, a mapping's faults), which no stream feed serves
// (vfs.Handle.ReadPageCache).
func (fh *fileHandle) ReadWithFlags(ctx context.Context, dest []byte, off int64, readFlags uint32) (fuse.ReadResult, syscall.Errno) {
	start := time.Now()
	var r vfs.Reply
	var err error
	if readFlags&fuse.READ_LOCKOWNER != 0 {
		r, err = fh.h.Read(ctx, off, len(dest))
	} else {
		r, err = fh.h.ReadPageCache(ctx, off, len(dest))
	}
	fh.mount.m.PosixReads.Inc()
	fh.mount.m.PosixReadSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		en := fh.node.readErrno(err)
		fh.mount.m.PosixReadErrors.WithLabelValues(errnoName(en)).Inc()
		return nil, en
	}
	stats := &fh.node.stats
	switch {
	case r.Pipe != nil:
		// go-fuse splices the pipe's bytes on behind the header.
		p := r.Pipe
		return pipeResult{fd: p.FD, n: p.N, m: fh.mount.m, done: func() { stats.spliced(p.Done()) }}, 0
	case r.Data != nil:
		stats.posix(len(r.Data))
		return fuse.ReadResultData(r.Data), 0
	}
	// The reply is written straight from the cached blocks (one writev),
	// never copied into dest first.
	stats.posix(r.Size())
	return blockResult{views: r.Views, release: r.Release}, 0
}

// blockResult hands the kernel cached blocks' bytes and gives the blocks
// back once go-fuse has written them. Slices makes go-fuse send them with
// one writev, skipping its splice attempt, which only helps file-backed
// results.
type blockResult struct {
	views   [][]byte
	release func()
}

func (r blockResult) Slices() ([][]byte, fuse.Status) { return r.views, fuse.OK }

func (r blockResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if len(r.views) == 1 {
		return r.views[0], fuse.OK
	}
	buf = buf[:0]
	for _, v := range r.views {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

func (r blockResult) Size() int {
	n := 0
	for _, v := range r.views {
		n += len(v)
	}
	return n
}

func (r blockResult) Done() { r.release() }

// pipeResult is a reply whose bytes wait in a spliced handle's pipe
// (vfs/splice.go): go-fuse splices them on into /dev/fuse behind the
// header, so the daemon never copies them. Its Done, once the reply is
// written, gives the pipe back to the handle's spliced GET
// (vfs.PipeReply).
type pipeResult struct {
	fd, n int
	done  func()
	m     *metrics.Set
}

func (r pipeResult) Stateful() (uintptr, int) { return uintptr(r.fd), r.n }
func (r pipeResult) Size() int                { return r.n }
func (r pipeResult) Done()                    { r.done() }

// Bytes is go-fuse's way out when it could not splice: the bytes are read
// out of the pipe (TIOCINQ is FIONREAD), unless some of them have left it
// already (then the request fails rather than wait for bytes that will not
// come).
func (r pipeResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if k, err := unix.IoctlGetInt(r.fd, unix.TIOCINQ); err != nil || k < r.n {
		return nil, fuse.EIO
	}
	if len(buf) < r.n {
		buf = make([]byte, r.n)
	}
	for got := 0; got < r.n; {
		k, err := unix.Read(r.fd, buf[got:r.n])
		if err != nil || k == 0 {
			return nil, fuse.EIO
		}
		got += k
	}
	r.m.SpliceCopied.Add(float64(r.n))
	return buf[:r.n], fuse.OK
}

func (fh *fileHandle) Release(ctx context.Context) syscall.Errno {
	fh.h.Close()
	fh.mount.callers.Released(fh)
	return 0
}

// dirStream feeds the kernel one listing page at a time.
type dirStream struct {
	r    *vfs.DirReader
	buf  []vfs.Entry
	err  error
	done bool
	// pending are the names shown ahead of the listing (Pending); the
	// listing's own entry of such a name (an object being replaced) is
	// skipped.
	pending map[string]bool
}

func (s *dirStream) HasNext() bool {
	for len(s.buf) == 0 && !s.done && s.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		batch, err := s.r.Next(ctx)
		cancel()
		if s.pending != nil && len(batch) > 0 {
			batch = slices.DeleteFunc(batch, func(e vfs.Entry) bool { return s.pending[e.Name] })
			if err == nil && len(batch) == 0 {
				continue // all shown already; the listing goes on
			}
		}
		s.buf, s.err = batch, err
		if err == nil && len(batch) == 0 {
			s.done = true
		}
	}
	return len(s.buf) > 0 || s.err != nil
}

func (s *dirStream) Next() (fuse.DirEntry, syscall.Errno) {
	if len(s.buf) == 0 {
		err := s.err
		s.err = nil
		s.done = true
		return fuse.DirEntry{}, errno(err)
	}
	e := s.buf[0]
	s.buf = s.buf[1:]
	mode := uint32(syscall.S_IFREG)
	if e.Dir {
		mode = syscall.S_IFDIR
	}
	return fuse.DirEntry{Name: e.Name, Mode: mode, Ino: e.Ino()}, 0
}

func (s *dirStream) Close() {}

// hostname is reported in stats so a dashboard can tell daemons apart.
var hostname, _ = os.Hostname()

// fuseLogLevel is the level of go-fuse's own log lines.
func fuseLogLevel(debug bool) slog.Level {
	if debug {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
