// Command loopexp measures what a FUSE request costs below any FUSE
// library: it serves one memory-held file, "f", with direct I/O through a
// minimal loop of its own on /dev/fuse (no go-fuse), so a reader's rate
// through it is the kernel's floor for a daemon that answers at once. The
// loop either blocks in read(2) on /dev/fuse, as every FUSE library does,
// or polls it without sleeping (O_NONBLOCK, spinning on EAGAIN for up to
// -spin before it sleeps in poll(2)), which keeps the daemon's thread on a
// running CPU: the difference is the price of waking a sleeping thread for
// every request. It is the experiment behind the request-cost paragraph
// of docs/architecture.md (scripts/gpu/loop_experiment.sh).
//
//	loopexp [-threads N] [-spin DURATION] [-size BYTES] MOUNTPOINT
//
// It serves until SIGINT or the mount goes away.
package main

import (
	"crypto/md5"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

var (
	threads = flag.Int("threads", 2, "threads reading /dev/fuse")
	spin    = flag.Duration("spin", 0, "poll /dev/fuse without sleeping for up to this long after each request (0: block in read)")
	size    = flag.Int64("size", 1<<30, "file size")
	maxRead = flag.Int("max-read", 1<<20, "largest read reply")
)

const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opOpen        = 14
	opRead        = 15
	opRelease     = 18
	opFlush       = 25
	opInit        = 26
	opBatchForget = 42
	fileIno       = 2
	// fopenDirectIO is FOPEN_DIRECT_IO: replies go straight to the reader's buffer.
	fopenDirectIO = 1
	capAsyncRead  = 1 << 0
	capBigWrites  = 1 << 5
	capMaxPages   = 1 << 22
)

var (
	data     []byte
	requests atomic.Int64
	sleeps   atomic.Int64
)

func main() {
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: loopexp [flags] MOUNTPOINT")
		os.Exit(2)
	}
	mnt := flag.Arg(0)
	data = make([]byte, *size)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	fmt.Printf("md5 %x\n", md5.Sum(data))
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		fatal("open /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,max_read=%d", fd, *maxRead)
	if err := syscall.Mount("loopexp", mnt, "fuse.loopexp", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		fatal("mount: %v", err)
	}
	if *spin > 0 {
		if err := syscall.SetNonblock(fd, true); err != nil {
			fatal("nonblock: %v", err)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{}, *threads)
	for range *threads {
		go func() { serve(fd); done <- struct{}{} }()
	}
	fmt.Printf("loopexp: serving %s/f (%d bytes), %d threads, spin %v\n", mnt, *size, *threads, *spin)
	select {
	case <-sig:
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	case <-done:
	}
	fmt.Printf("loopexp: %d requests, %d slept\n", requests.Load(), sleeps.Load())
}

func fatal(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "loopexp: "+f+"\n", a...)
	os.Exit(1)
}

// serve answers requests on one locked thread until the mount goes away.
func serve(fd int) {
	runtime.LockOSThread()
	buf := make([]byte, *maxRead+64*1024)
	for {
		n, err := readRequest(fd, buf)
		if err == syscall.ENODEV {
			return
		}
		if err != nil {
			fatal("read /dev/fuse: %v", err)
		}
		requests.Add(1)
		handle(fd, buf[:n])
	}
}

// readRequest reads one request, spinning on EAGAIN for up to -spin and
// then sleeping in poll(2) until one comes.
func readRequest(fd int, buf []byte) (int, error) {
	var deadline time.Time
	for {
		n, _, e := syscall.Syscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		switch e {
		case 0:
			return int(n), nil
		case syscall.EINTR, syscall.ENOENT:
			continue
		case syscall.EAGAIN:
		default:
			return 0, e
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(*spin)
			continue
		}
		if time.Now().Before(deadline) {
			continue
		}
		sleeps.Add(1)
		pfd := []pollFd{{fd: int32(fd), events: 1}}
		syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd[0])), 1, 0, 0, 0, 0)
		deadline = time.Time{}
	}
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

func handle(fd int, req []byte) {
	h := (*fuse.InHeader)(unsafe.Pointer(&req[0]))
	body := req[unsafe.Sizeof(fuse.InHeader{}):]
	switch h.Opcode {
	case opForget, opBatchForget:
		return
	case opInit:
		in := (*fuse.InitIn)(unsafe.Pointer(&req[0]))
		o := fuse.InitOut{
			Major: 7, Minor: in.Minor, MaxReadAhead: in.MaxReadAhead,
			Flags:         in.Flags & (capAsyncRead | capBigWrites | capMaxPages),
			MaxBackground: 12, CongestionThreshold: 9, MaxWrite: 1 << 20, TimeGran: 1,
			MaxPages: uint16(*maxRead / 4096),
		}
		if in.Minor > 40 {
			o.Minor = 40
		}
		reply(fd, h, 0, asBytes(&o))
	case opLookup:
		name := string(body[:len(body)-1])
		if h.NodeId != 1 || name != "f" {
			reply(fd, h, -int32(syscall.ENOENT), nil)
			return
		}
		e := fuse.EntryOut{NodeId: fileIno, EntryValid: 3600, AttrValid: 3600}
		fileAttr(&e.Attr)
		reply(fd, h, 0, asBytes(&e))
	case opGetattr:
		a := fuse.AttrOut{AttrValid: 3600}
		if h.NodeId == 1 {
			a.Attr = fuse.Attr{Ino: 1, Mode: syscall.S_IFDIR | 0o755, Nlink: 2}
		} else {
			fileAttr(&a.Attr)
		}
		reply(fd, h, 0, asBytes(&a))
	case opOpen:
		if h.NodeId != fileIno {
			reply(fd, h, -int32(syscall.EISDIR), nil)
			return
		}
		o := fuse.OpenOut{Fh: 1, OpenFlags: fopenDirectIO}
		reply(fd, h, 0, asBytes(&o))
	case opRead:
		in := (*fuse.ReadIn)(unsafe.Pointer(&req[0]))
		off, n := int64(in.Offset), int64(in.Size)
		if off > int64(len(data)) {
			off = int64(len(data))
		}
		n = min(n, int64(len(data))-off)
		reply(fd, h, 0, data[off:off+n])
	case opFlush, opRelease:
		reply(fd, h, 0, nil)
	default:
		reply(fd, h, -int32(syscall.ENOSYS), nil)
	}
}

func fileAttr(a *fuse.Attr) {
	*a = fuse.Attr{Ino: fileIno, Size: uint64(len(data)), Blocks: uint64(len(data)+511) / 512, Mode: syscall.S_IFREG | 0o444, Nlink: 1}
	a.Blksize = 1 << 20
}

func asBytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// reply writes the header and payload with one writev.
func reply(fd int, h *fuse.InHeader, status int32, payload []byte) {
	var hdr [16]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(16+len(payload)))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(status))
	binary.LittleEndian.PutUint64(hdr[8:], h.Unique)
	iov := []syscall.Iovec{{Base: &hdr[0], Len: 16}}
	if len(payload) > 0 {
		iov = append(iov, syscall.Iovec{Base: &payload[0], Len: uint64(len(payload))})
	}
	for {
		_, _, e := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 && e != syscall.ENOENT {
			fmt.Fprintf(os.Stderr, "loopexp: reply to op %d: %v\n", h.Opcode, e)
		}
		return
	}
}
