package cufile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultStandinDir is where the host stand-in looks for its "device memory".
const DefaultStandinDir = "/dev/shm"

// NewHostStandin returns a Backend that stands in for CUDA with host memory,
// for machines without a GPU; enable it only from an explicit test setting.
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
func NewHostStandin(dir string) (Backend, error) {
	if dir == "" {
		dir = DefaultStandinDir
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("cufile: host stand-in directory: %w", err)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cufile: host stand-in directory %s is not a directory", dir)
	}
	return &hostStandin{dir: real}, nil
}

type hostStandin struct {
	dir       string // symlinks resolved
	copyDelay time.Duration
}

func (h *hostStandin) Name() string { return "host-standin" }

func (h *hostStandin) Devices() ([]DeviceInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(h.dir, &st); err != nil {
		return nil, fmt.Errorf("cufile: host stand-in: %w", err)
	}
	return []DeviceInfo{{Ordinal: 0, Name: "host-standin", TotalMem: st.Blocks * uint64(st.Bsize)}}, nil
}

func checkStandinDevice(device int) error {
	if device != 0 {
		return fmt.Errorf("%w: %d (the host stand-in has device 0 only)", ErrNoDevice, device)
	}
	return nil
}

func (h *hostStandin) Import(device int, hd Handle) (Allocation, error) {
	if err := checkStandinDevice(device); err != nil {
		return nil, err
	}
	path, err := h.resolve(hd)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHandle, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHandle, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil, fmt.Errorf("%w: %s is not a non-empty regular file", ErrBadHandle, path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap %s: %v", ErrBadHandle, path, err)
	}
	return &hostAllocation{mem: mem, size: uint64(len(mem))}, nil
}

// resolve turns a handle into a path inside the stand-in's directory,
// refusing '..', absolute paths elsewhere and symlinks that lead out.
func (h *hostStandin) resolve(hd Handle) (string, error) {
	end := slices.Index(hd[:], 0)
	if end <= 0 {
		return "", fmt.Errorf("%w: stand-in handle holds no NUL-terminated name", ErrBadHandle)
	}
	name := string(hd[:end])
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("%w: %q has a '..' element", ErrBadHandle, name)
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(h.dir, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadHandle, err)
	}
	if rel, err := filepath.Rel(h.dir, real); err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: %q is outside %s", ErrBadHandle, name, h.dir)
	}
	return real, nil
}

func (h *hostStandin) NewStager(device int, cfg StagerConfig) (Stager, error) {
	if err := checkStandinDevice(device); err != nil {
		return nil, err
	}
	return newStager(&hostDevice{copyDelay: h.copyDelay}, cfg)
}

// hostAllocation is a shared mapping of a stand-in file.
type hostAllocation struct {
	mu     sync.RWMutex // copies hold it shared, Close exclusive
	mem    []byte
	size   uint64
	closed bool
}

func (a *hostAllocation) Device() int  { return 0 }
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
		return nil, fmt.Errorf("%w: allocation closed", ErrBadHandle)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: copy faulted: %v", ErrBadHandle, r)
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
		return fmt.Errorf("%w: allocation closed", ErrBadHandle)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: copy faulted: %v", ErrBadHandle, r)
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

func (d *hostDevice) ordinal() int              { return 0 }
func (d *hostDevice) run(fn func() error) error { return fn() }

func (d *hostDevice) allocHost(size int) ([]byte, error) { return make([]byte, size), nil }
func (d *hostDevice) freeHost([]byte) error              { return nil }

func (d *hostDevice) newStream() (uintptr, error) {
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
		if job.from != nil {
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

func (d *hostDevice) destroyStream(h uintptr) error {
	st := d.stream(h)
	close(st.jobs)
	<-st.done
	return nil
}

func (d *hostDevice) newFence() (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fences = append(d.fences, &hostFence{})
	return uintptr(len(d.fences)), nil
}

func (d *hostDevice) destroyFence(uintptr) error { return nil }

func (d *hostDevice) copyAsync(stream, fence uintptr, src []byte, dst Allocation, dstOff uint64, fault func(error)) error {
	a, ok := dst.(*hostAllocation)
	if !ok {
		return fmt.Errorf("%w: not a host stand-in allocation", ErrBadHandle)
	}
	a.mu.RLock()
	closed := a.closed
	a.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: allocation closed", ErrBadHandle)
	}
	c := &hostCopy{done: make(chan struct{})}
	f := d.fence(fence)
	f.mu.Lock()
	f.last = c
	f.mu.Unlock()
	d.stream(stream).jobs <- hostJob{dst: a, off: dstOff, src: src, copy: c, fault: fault}
	return nil
}

func (d *hostDevice) copyDtoDAsync(stream uintptr, src Allocation, srcOff uint64, dst Allocation, dstOff uint64, n uint64, fault func(error)) error {
	from, ok1 := src.(*hostAllocation)
	to, ok2 := dst.(*hostAllocation)
	if !ok1 || !ok2 {
		return fmt.Errorf("%w: not a host stand-in allocation", ErrBadHandle)
	}
	for _, a := range []*hostAllocation{from, to} {
		a.mu.RLock()
		closed := a.closed
		a.mu.RUnlock()
		if closed {
			return fmt.Errorf("%w: allocation closed", ErrBadHandle)
		}
	}
	d.stream(stream).jobs <- hostJob{dst: to, off: dstOff, from: from, fromOff: srcOff, n: n, fault: fault}
	return nil
}

func (f *hostFence) current() *hostCopy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (d *hostDevice) fenceDone(fence uintptr) (bool, error) {
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

func (d *hostDevice) waitFence(fence uintptr) error {
	c := d.fence(fence).current()
	if c == nil {
		return nil
	}
	<-c.done
	return c.err
}

// syncStream waits until the stream's worker has finished every job
// enqueued before it, and reports a copy that failed meanwhile.
func (d *hostDevice) syncStream(stream uintptr) error {
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
