// Package hoststandin stands in for CUDA with host memory, so that the
// whole GPU read path can run on machines without a GPU: files in a
// directory play the device buffers, and copies into them run
// asynchronously on stream goroutines, through the same stager (package
// staging) as the CUDA binding's. It is a test and demonstration aid.
package hoststandin

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/staging"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// DefaultDir is where the host stand-in looks for its "device memory".
const DefaultDir = "/dev/shm"

// New returns a Backend that stands in for CUDA with host memory, for
// machines without a GPU; enable it only from an explicit test setting.
//
// It has one device, 0, named "host-standin". A Handle holds a NUL-terminated
// file name, relative to dir or absolute inside it (dir "" is /dev/shm);
// Import maps that file shared and writable, so the file's bytes are the
// allocation's. A name is one allocation for as long as the daemon holds its
// import (until the caller's files read through are released, or it
// exits), as an IPC handle is: a file removed and made again under the same
// name meanwhile is still the old mapping, so a new buffer needs a new name.
// Copies run on one goroutine per stream, asynchronously, as on a device,
// and every check the CUDA backend makes is made here too.
//
// The daemon writes the file with its own rights (root's), so a name is
// resolved beneath dir with no symlink in any component and the file
// opened must be a regular file of the caller's (ImportAs): a user can have
// object bytes written only into a file that user could write anyway.
func New(dir string) (cufile.Backend, error) {
	if dir == "" {
		dir = DefaultDir
	}
	given, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("cufile: host stand-in directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("cufile: host stand-in directory: %w", err)
	}
	// Held open for the daemon's life: names resolve beneath this
	// directory, whatever happens to the path that named it.
	root, err := os.OpenFile(real, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cufile: host stand-in directory %s is not a directory: %v", dir, err)
	}
	h := &hostStandin{dir: real, given: given, root: root}
	h.walk = !openat2Works(int(root.Fd()))
	return h, nil
}

type hostStandin struct {
	dir   string   // symlinks resolved
	given string   // as configured, absolute: names may start with it too
	root  *os.File // dir, opened at start
	// walk: openat2 is unavailable (ENOSYS, or refused by a seccomp
	// filter), so names are resolved one component at a time.
	walk      bool
	copyDelay time.Duration
}

// SlowCopies makes every copy of the stagers b makes from now on take d
// longer, as over a slow link, so that tests can have copies lag behind the
// fills of the next slots. b must come from New.
func SlowCopies(b cufile.Backend, d time.Duration) {
	h, ok := b.(*hostStandin)
	if !ok {
		panic(fmt.Sprintf("hoststandin.SlowCopies of a %s backend", b.Name()))
	}
	h.copyDelay = d
}

func (h *hostStandin) Name() string { return "host-standin" }

func (h *hostStandin) Devices() ([]cufile.DeviceInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(h.dir, &st); err != nil {
		return nil, fmt.Errorf("cufile: host stand-in: %w", err)
	}
	return []cufile.DeviceInfo{{Ordinal: 0, Name: "host-standin", TotalMem: st.Blocks * uint64(st.Bsize)}}, nil
}

func checkStandinDevice(device int) error {
	if device != 0 {
		return fmt.Errorf("%w: %d (the host stand-in has device 0 only)", cufile.ErrNoDevice, device)
	}
	return nil
}

// Import imports hd for the daemon's own effective uid.
func (h *hostStandin) Import(device int, hd cufile.Handle) (cufile.Allocation, error) {
	return h.ImportAs(device, hd, uint32(os.Geteuid()))
}

// ImportAs maps the file hd names if it is a non-empty regular file owned
// by uid, reached beneath the directory through no symlink. A refusal wraps
// ErrBadHandle and carries its errno (docs/ioctl.md): EXDEV for a name
// leading outside, ELOOP for a symlink in it, EINVAL for a file that is not
// a non-empty regular file, EPERM for another user's file; a name that
// does not open is EBADF.
func (h *hostStandin) ImportAs(device int, hd cufile.Handle, uid uint32) (cufile.Allocation, error) {
	if err := checkStandinDevice(device); err != nil {
		return nil, err
	}
	f, err := h.open(hd, uid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", cufile.ErrBadHandle, err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap %s: %v", cufile.ErrBadHandle, f.Name(), err)
	}
	return &hostAllocation{mem: mem, size: uint64(len(mem))}, nil
}

// refused is an import refusal with the errno the read ioctl answers.
func refused(code syscall.Errno, format string, args ...any) error {
	return errno.With(code, fmt.Errorf("%w: "+format, append([]any{cufile.ErrBadHandle}, args...)...))
}

// open opens the buffer hd names for uid. Every check is made on the
// opened descriptor, never on a path beforehand: a name swapped between a
// check and the open cannot move the write elsewhere.
func (h *hostStandin) open(hd cufile.Handle, uid uint32) (*os.File, error) {
	name, rel, err := h.relative(hd)
	if err != nil {
		return nil, err
	}
	fd, err := h.openBeneath(rel)
	if err != nil {
		switch err {
		case unix.ELOOP:
			return nil, refused(syscall.ELOOP, "%q: a component is a symlink (the host stand-in follows none)", name)
		case unix.EXDEV:
			return nil, refused(syscall.EXDEV, "%q leads outside %s", name, h.dir)
		case unix.EISDIR, unix.ENXIO:
			return nil, refused(syscall.EINVAL, "%q is not a regular file", name)
		}
		return nil, fmt.Errorf("%w: %q: %v", cufile.ErrBadHandle, name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(h.dir, rel))
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %q: %v", cufile.ErrBadHandle, name, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = refused(syscall.EINVAL, "%q is not a regular file", name)
	case st.Uid != uid:
		err = refused(syscall.EPERM, "%q belongs to uid %d, not to the caller (uid %d)", name, st.Uid, uid)
	case st.Size <= 0:
		err = refused(syscall.EINVAL, "%q is empty", name)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// relative turns a handle into its name and the path relative to the
// directory that names the same file, refusing '..' anywhere and absolute
// names elsewhere (EXDEV).
func (h *hostStandin) relative(hd cufile.Handle) (name, rel string, err error) {
	end := slices.Index(hd[:], 0)
	if end <= 0 {
		return "", "", fmt.Errorf("%w: stand-in handle holds no NUL-terminated name", cufile.ErrBadHandle)
	}
	name = string(hd[:end])
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", "", refused(syscall.EXDEV, "%q has a '..' element", name)
	}
	if !filepath.IsAbs(name) {
		return name, filepath.Clean(name), nil
	}
	for _, d := range []string{h.dir, h.given} {
		if r, err := filepath.Rel(d, filepath.Clean(name)); err == nil && filepath.IsLocal(r) {
			return name, r, nil
		}
	}
	return "", "", refused(syscall.EXDEV, "%q is outside %s", name, h.dir)
}

// bufferOpenFlags open a buffer for writing: never a symlink, never
// creating, never blocking (a FIFO, a leased file), never a terminal.
const bufferOpenFlags = unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// openBeneath opens rel (relative, no '..') beneath the directory with no
// symlink at any component: in one openat2 where the kernel has it,
// otherwise one openat per component, each refusing a symlink.
func (h *hostStandin) openBeneath(rel string) (int, error) {
	defer runtime.KeepAlive(h.root)
	root := int(h.root.Fd())
	if !h.walk {
		return openat2Beneath(root, rel, bufferOpenFlags)
	}
	var parts []string
	for _, p := range strings.Split(rel, "/") {
		if p != "" && p != "." {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		parts = []string{"."}
	}
	dir := root
	defer func() {
		if dir != root {
			unix.Close(dir)
		}
	}()
	for _, p := range parts[:len(parts)-1] {
		// Not O_DIRECTORY: with it a symlink is ENOTDIR, not ELOOP.
		fd, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		if dir != root {
			unix.Close(dir)
		}
		dir = fd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return -1, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return -1, unix.ENOTDIR
		}
	}
	return unix.Openat(dir, parts[len(parts)-1], bufferOpenFlags, 0)
}

func (h *hostStandin) NewStager(device int, cfg cufile.StagerConfig) (cufile.Stager, error) {
	if err := checkStandinDevice(device); err != nil {
		return nil, err
	}
	return staging.New(&hostDevice{copyDelay: h.copyDelay}, cfg)
}

// NewDevice is the stand-in's device, each copy taking copyDelay more,
// for a stager made with staging.New by a test that watches its copies (a
// Device wrapping it).
func NewDevice(copyDelay time.Duration) staging.Device { return &hostDevice{copyDelay: copyDelay} }

// hostAllocation is a shared mapping of a stand-in file.
type hostAllocation struct {
	mu     sync.RWMutex // copies hold it shared, Close exclusive
	mem    []byte
	size   uint64
	closed bool
}

func (a *hostAllocation) Device() int { return 0 }

// DevicePtr is the address of the shared mapping (cufile.DevicePointer).
func (a *hostAllocation) DevicePtr() uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed || len(a.mem) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(a.mem))))
}
func (a *hostAllocation) Size() uint64 { return a.size }

func (a *hostAllocation) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	mem := a.mem
	a.mem = nil
	return unix.Munmap(mem)
}

// read copies n bytes at off out of the mapping, on a stream's worker.
func (a *hostAllocation) read(off, n uint64) (buf []byte, err error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return nil, fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: copy faulted: %v", cufile.ErrBadHandle, r)
		}
	}()
	buf = make([]byte, n)
	copy(buf, a.mem[off:off+n])
	return buf, nil
}

// write runs on a stream's worker, which has faults turned into panics: a
// file truncated under its mapping fails the copy instead of the daemon.
func (a *hostAllocation) write(off uint64, src []byte) (err error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: copy faulted: %v", cufile.ErrBadHandle, r)
		}
	}()
	copy(a.mem[off:], src)
	return nil
}

// hostDevice runs a stager's copies: each stream is a goroutine working
// through its jobs in order; each fence is the latest copy recorded on it.
type hostDevice struct {
	copyDelay time.Duration // tests: slows copies so they overlap fills

	mu      sync.Mutex
	streams []*hostStream // handle i+1
	fences  []*hostFence  // handle i+1
}

type hostStream struct {
	jobs chan hostJob
	done chan struct{}

	mu     sync.Mutex
	failed error // first failed copy with no fault to report to, since the last sync
}

type hostJob struct {
	dst     *hostAllocation
	off     uint64
	src     []byte
	from    *hostAllocation // a device-to-device copy: n bytes of from at fromOff
	fromOff uint64
	n       uint64
	toHost  []byte        // a device-to-host copy: len(toHost) bytes of from at fromOff
	copy    *hostCopy     // completed after the job
	barrier chan struct{} // closed when reached (Sync)
	// fault takes the job's failure, before copy completes: a copy that
	// faults is its own copier's failure, not the stream's, so a request
	// whose buffer is truncated does not fail the others on its stream.
	fault func(error)
}

type hostFence struct {
	mu   sync.Mutex
	last *hostCopy
}

type hostCopy struct {
	done chan struct{}
	err  error // set before done is closed
}

func (d *hostDevice) Ordinal() int              { return 0 }
func (d *hostDevice) Run(fn func() error) error { return fn() }

func (d *hostDevice) AllocHost(size int) ([]byte, error) { return make([]byte, size), nil }
func (d *hostDevice) FreeHost([]byte) error              { return nil }

func (d *hostDevice) NewStream() (uintptr, error) {
	st := &hostStream{jobs: make(chan hostJob, 64), done: make(chan struct{})}
	go d.work(st)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.streams = append(d.streams, st)
	return uintptr(len(d.streams)), nil
}

func (d *hostDevice) work(st *hostStream) {
	defer close(st.done)
	debug.SetPanicOnFault(true)
	for job := range st.jobs {
		if job.barrier != nil {
			close(job.barrier)
			continue
		}
		time.Sleep(d.copyDelay)
		var err error
		if job.toHost != nil {
			var buf []byte
			if buf, err = job.from.read(job.fromOff, uint64(len(job.toHost))); err == nil {
				copy(job.toHost, buf)
			}
		} else if job.dst == nil && job.from == nil {
			// A fence recorded on the stream: nothing to copy.
		} else if job.from != nil {
			var buf []byte
			if buf, err = job.from.read(job.fromOff, job.n); err == nil {
				err = job.dst.write(job.off, buf)
			}
		} else {
			err = job.dst.write(job.off, job.src)
		}
		if err != nil {
			if job.fault != nil {
				job.fault(err)
				err = nil
			} else {
				st.mu.Lock()
				if st.failed == nil {
					st.failed = err
				}
				st.mu.Unlock()
			}
		}
		if job.copy != nil {
			job.copy.err = err
			close(job.copy.done)
		}
	}
}

func (d *hostDevice) stream(h uintptr) *hostStream {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.streams[h-1]
}

func (d *hostDevice) fence(h uintptr) *hostFence {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fences[h-1]
}

func (d *hostDevice) DestroyStream(h uintptr) error {
	st := d.stream(h)
	close(st.jobs)
	<-st.done
	return nil
}

func (d *hostDevice) NewFence() (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fences = append(d.fences, &hostFence{})
	return uintptr(len(d.fences)), nil
}

func (d *hostDevice) DestroyFence(uintptr) error { return nil }

// RecordFence makes fence the next job of stream, a copy of nothing.
func (d *hostDevice) RecordFence(stream, fence uintptr) error {
	c := &hostCopy{done: make(chan struct{})}
	f := d.fence(fence)
	f.mu.Lock()
	f.last = c
	f.mu.Unlock()
	d.stream(stream).jobs <- hostJob{copy: c}
	return nil
}

// AllocDevice maps size bytes of anonymous memory: the stand-in's device
// memory of the daemon's own.
func (d *hostDevice) AllocDevice(size int) (cufile.Allocation, error) {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("device memory of %d bytes: %w", size, err)
	}
	return &hostAllocation{mem: mem, size: uint64(size)}, nil
}

func (d *hostDevice) CopyAsync(stream, fence uintptr, src []byte, dst cufile.Allocation, dstOff uint64, fault func(error)) error {
	a, ok := dst.(*hostAllocation)
	if !ok {
		return fmt.Errorf("%w: not a host stand-in allocation", cufile.ErrBadHandle)
	}
	a.mu.RLock()
	closed := a.closed
	a.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
	}
	c := &hostCopy{done: make(chan struct{})}
	f := d.fence(fence)
	f.mu.Lock()
	f.last = c
	f.mu.Unlock()
	d.stream(stream).jobs <- hostJob{dst: a, off: dstOff, src: src, copy: c, fault: fault}
	return nil
}

func (d *hostDevice) CopyDtoDAsync(stream uintptr, src cufile.Allocation, srcOff uint64, dst cufile.Allocation, dstOff uint64, n uint64, fault func(error)) error {
	from, ok1 := src.(*hostAllocation)
	to, ok2 := dst.(*hostAllocation)
	if !ok1 || !ok2 {
		return fmt.Errorf("%w: not a host stand-in allocation", cufile.ErrBadHandle)
	}
	for _, a := range []*hostAllocation{from, to} {
		a.mu.RLock()
		closed := a.closed
		a.mu.RUnlock()
		if closed {
			return fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
		}
	}
	d.stream(stream).jobs <- hostJob{dst: to, off: dstOff, from: from, fromOff: srcOff, n: n, fault: fault}
	return nil
}

func (d *hostDevice) CopyDtoHAsync(stream uintptr, src cufile.Allocation, srcOff uint64, dst []byte, fault func(error)) error {
	from, ok := src.(*hostAllocation)
	if !ok {
		return fmt.Errorf("%w: not a host stand-in allocation", cufile.ErrBadHandle)
	}
	from.mu.RLock()
	closed := from.closed
	from.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: allocation closed", cufile.ErrBadHandle)
	}
	d.stream(stream).jobs <- hostJob{from: from, fromOff: srcOff, toHost: dst, fault: fault}
	return nil
}

func (f *hostFence) current() *hostCopy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (d *hostDevice) FenceDone(fence uintptr) (bool, error) {
	c := d.fence(fence).current()
	if c == nil {
		return true, nil
	}
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

func (d *hostDevice) WaitFence(fence uintptr) error {
	c := d.fence(fence).current()
	if c == nil {
		return nil
	}
	<-c.done
	return c.err
}

// SyncStream waits until the stream's worker has finished every job
// enqueued before it, and reports a copy that failed meanwhile.
func (d *hostDevice) SyncStream(stream uintptr) error {
	st := d.stream(stream)
	barrier := make(chan struct{})
	st.jobs <- hostJob{barrier: barrier}
	<-barrier
	st.mu.Lock()
	defer st.mu.Unlock()
	err := st.failed
	st.failed = nil
	return err
}
