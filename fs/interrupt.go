package fs

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/metrics"
)

// Only a kill interrupts a request, as with NFS (docs/architecture.md,
// "Interrupts"). go-fuse closes a request's cancel channel when the kernel
// sends an INTERRUPT for it (a signal to the caller inside the request)
// and when the connection ends. The nodes see a channel of the adapter's
// instead (rawFS), closed only when the caller is being killed or the
// connection is gone: a signal the caller handles leaves its read to
// finish, since programs rarely expect EINTR from a regular file (C's
// stdio reports it as a read error).

const (
	// scanInterval is how often a mount's requests in flight are looked
	// at for an INTERRUPT, while there are any: a kill inside a request
	// is noticed within it. A timer for each request instead would wake
	// the runtime's poller thread as it is armed, for most READs
	// (docs/benchmarks.md, "Defaults and why").
	scanInterval = 10 * time.Millisecond
	// killWatchInterval is how often a caller interrupted by a signal it
	// handles is looked at again. The kernel sends one INTERRUPT per
	// request: a kill that follows a handled signal sends none, and the
	// caller waits for the answer.
	killWatchInterval = 50 * time.Millisecond
)

// serve mounts root at mountpoint as gofs.Mount does, with the nodes
// behind rawFS.
func serve(mountpoint string, root gofs.InodeEmbedder, opts *gofs.Options, m *metrics.Set) (*fuse.Server, error) {
	raw := newRawFS(gofs.NewNodeFS(root, opts), m, mountpoint)
	server, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err == nil {
		raw.dev = st.Dev
	}
	return server, nil
}

// rawFS is the raw filesystem go-fuse serves: gofs's bridge to the nodes,
// whose requests get a cancel channel closed only when their caller is
// being killed (guard), and whose READ replies are timed (replies.go).
// Only the requests a read-only mount is sent are guarded; the kernel
// refuses the others itself.
type rawFS struct {
	fuse.RawFileSystem
	m          *metrics.Set
	mountpoint string
	dev        uint64 // the mount's device number (0: unknown)
	inflight   inflight
}

func newRawFS(bridge fuse.RawFileSystem, m *metrics.Set, mountpoint string) *rawFS {
	r := &rawFS{RawFileSystem: bridge, m: m, mountpoint: mountpoint}
	r.inflight.scanner = time.AfterFunc(time.Hour, r.inflight.scan)
	r.inflight.scanner.Stop()
	return r
}

// guard is one request's cancel channel as the nodes see it. Guards no
// watch took go back to a pool, channel with them, as go-fuse reuses a
// request's channel unless it was closed.
type guard struct {
	fs     *rawFS
	pid    uint32
	kernel <-chan struct{} // go-fuse's, closed by an INTERRUPT
	cancel chan struct{}   // the nodes', closed by a kill

	// Under inflight.mu:
	prev, next *guard
	done       chan struct{} // set when a watch takes the request; closed as it returns
}

var guards = sync.Pool{New: func() any { return &guard{cancel: make(chan struct{})} }}

// inflight is a mount's guarded requests, a list that scan walks every
// scanInterval while it is not empty or a request came since the last
// scan: a stream of requests keeps the scan going from its own timer
// rather than setting it again from a request.
type inflight struct {
	mu      sync.Mutex
	head    *guard
	armed   bool // scanner is set
	came    bool // a request came since the last scan
	scanner *time.Timer
}

func (r *rawFS) guard(kernel <-chan struct{}, caller fuse.Caller) *guard {
	g := guards.Get().(*guard)
	g.fs, g.pid, g.kernel = r, caller.Pid, kernel
	l := &r.inflight
	l.mu.Lock()
	g.prev, g.next = nil, l.head
	if l.head != nil {
		l.head.prev = g
	}
	l.head = g
	l.came = true
	if !l.armed {
		l.armed = true
		l.scanner.Reset(scanInterval)
	}
	l.mu.Unlock()
	return g
}

// end, as the request returns, takes it off the list and ends its watch.
func (g *guard) end() {
	l := &g.fs.inflight
	l.mu.Lock()
	if g.prev != nil {
		g.prev.next = g.next
	} else {
		l.head = g.next
	}
	if g.next != nil {
		g.next.prev = g.prev
	}
	g.prev, g.next = nil, nil
	done := g.done
	l.mu.Unlock()
	if done != nil {
		close(done) // the watch has g; it is not reused
		return
	}
	g.kernel = nil
	guards.Put(g)
}

// scan starts a watch of each request in flight that go-fuse has
// cancelled (an INTERRUPT, or the connection's end), and comes again
// while any are in flight.
func (l *inflight) scan() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for g := l.head; g != nil; g = g.next {
		if g.done == nil && closed(g.kernel) {
			g.done = make(chan struct{})
			go g.watch(g.done)
		}
	}
	if l.head != nil || l.came {
		l.scanner.Reset(scanInterval)
	} else {
		l.armed = false
	}
	l.came = false
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// watch, once go-fuse has cancelled the request, cancels it for the nodes
// at once if the caller is being killed or the connection is gone, and
// otherwise looks again every killWatchInterval until the request returns
// (done).
func (g *guard) watch(done <-chan struct{}) {
	if !callerKilled(g.pid) {
		conn := g.fs.openConnection()
		defer conn.close()
		for !callerKilled(g.pid) && !conn.gone() {
			select {
			case <-done:
				return
			case <-time.After(killWatchInterval):
			}
		}
	}
	close(g.cancel)
}

// connection is a hold on the mount's FUSE connection (an O_PATH
// descriptor of its root), taken while a caller that handled a signal is
// inside a request: the caller keeps the mount busy meanwhile, so the hold
// keeps no unmount from happening that could happen without it.
type connection int

// openConnection holds the mount's connection, if its mountpoint is still
// the mount (-1 when it is not: unmounted lazily, or covered).
func (r *rawFS) openConnection() connection {
	fd, err := unix.Open(r.mountpoint, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	var st unix.Stat_t
	if r.dev == 0 || unix.Fstat(fd, &st) != nil || st.Dev != r.dev {
		unix.Close(fd)
		return -1
	}
	return connection(fd)
}

func (c connection) close() {
	if c >= 0 {
		unix.Close(int(c))
	}
}

// gone says whether the connection has ended (aborted, or the device
// closed): go-fuse then closes every request's channel, as an INTERRUPT
// does, and the kernel answers the callers itself, so the requests
// should stop. statfs(2), always sent to the daemon, fails with ENOTCONN
// then, whether or not the mount has since been unmounted.
func (c connection) gone() bool {
	var st unix.Statfs_t
	return c >= 0 && unix.Fstatfs(int(c), &st) == unix.ENOTCONN
}

// callerKilled says whether thread tid is being killed: a fatal signal
// (SIGKILL, or one whose default action ends the process) puts SIGKILL
// among every thread's pending signals (complete_signal in the kernel),
// which /proc shows in SigPnd. A thread that is gone, or that the daemon
// cannot see (another pid namespace, or no /proc), counts as killed.
func callerKilled(tid uint32) bool {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return true
	}
	for _, field := range []string{"SigPnd:", "ShdPnd:"} {
		i := bytes.Index(b, []byte(field))
		if i < 0 {
			continue
		}
		line := b[i+len(field):]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		mask, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 64)
		if err == nil && mask&(1<<(unix.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

func (r *rawFS) Lookup(cancel <-chan struct{}, in *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Lookup(g.cancel, in, name, out)
}

func (r *rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.GetAttr(g.cancel, in, out)
}

func (r *rawFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Statx(g.cancel, in, out)
}

func (r *rawFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Access(g.cancel, in)
}

func (r *rawFS) Readlink(cancel <-chan struct{}, in *fuse.InHeader) ([]byte, fuse.Status) {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Readlink(g.cancel, in)
}

func (r *rawFS) GetXAttr(cancel <-chan struct{}, in *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.GetXAttr(g.cancel, in, attr, dest)
}

func (r *rawFS) ListXAttr(cancel <-chan struct{}, in *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.ListXAttr(g.cancel, in, dest)
}

func (r *rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Open(g.cancel, in, out)
}

func (r *rawFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	start := time.Now()
	g := r.guard(cancel, in.Caller)
	res, st := r.RawFileSystem.Read(g.cancel, in, buf)
	g.end()
	return r.timeReply(start, res, st)
}

func (r *rawFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Lseek(g.cancel, in, out)
}

func (r *rawFS) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.GetLk(g.cancel, in, out)
}

func (r *rawFS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.SetLk(g.cancel, in)
}

func (r *rawFS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.SetLkw(g.cancel, in)
}

func (r *rawFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Ioctl(g.cancel, in, inbuf, out, outbuf)
}

func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Flush(g.cancel, in)
}

func (r *rawFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.Fsync(g.cancel, in)
}

func (r *rawFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.OpenDir(g.cancel, in, out)
}

func (r *rawFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.ReadDir(g.cancel, in, out)
}

func (r *rawFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.ReadDirPlus(g.cancel, in, out)
}

func (r *rawFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.FsyncDir(g.cancel, in)
}

func (r *rawFS) StatFs(cancel <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	g := r.guard(cancel, in.Caller)
	defer g.end()
	return r.RawFileSystem.StatFs(g.cancel, in, out)
}
