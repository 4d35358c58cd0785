// Command spliceexp measures, with a TCP stream in place of S3, what it costs
// to carry a sequential reader's bytes from a socket to a direct-I/O FUSE
// reader: read into 1 MiB buffers ahead of the reader and answered with
// writev (the daemon's read path: two copies of each byte, socket to buffer
// and buffer to the reader), or spliced from the socket into a pipe and from
// the pipe into /dev/fuse (one copy, the kernel's from the socket's pages to
// the reader's). It is the experiment behind docs/benchmarks.md's "splice"
// rows (scripts/gpu/splice_experiment.sh).
//
//	spliceexp serve -addr 127.0.0.1:7171 -file FILE      sendfile FILE to every connection
//	spliceexp mount -mode copy|splice -addr ADDR -file FILE -files N MOUNTPOINT
//
// The mount serves files f0..f(N-1), each of FILE's size; every open dials
// the server and reads the stream in order (a read elsewhere fails with
// EIO). It serves until SIGINT and prints its CPU time per GB read.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

var (
	mode   = flag.String("mode", "copy", "copy|splice")
	addr   = flag.String("addr", "127.0.0.1:7171", "stream server")
	path   = flag.String("file", "", "the file the server sends")
	nfiles = flag.Int("files", 4, "files in the mount")
	ahead  = flag.Int("ahead", 32, "copy mode: 1 MiB buffers read ahead of the reader")
)

const bufSize = 1 << 20

var size int64
var served atomic.Int64

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: spliceexp serve|mount [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	flag.CommandLine.Parse(os.Args[2:])
	st, err := os.Stat(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "-file:", err)
		os.Exit(2)
	}
	size = st.Size()
	switch cmd {
	case "serve":
		serve()
	case "mount":
		mount(flag.Arg(0))
	default:
		fmt.Fprintln(os.Stderr, "usage: spliceexp serve|mount [flags]")
		os.Exit(2)
	}
}

func serve() {
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "serving")
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer c.Close()
			f, err := os.Open(*path)
			if err != nil {
				return
			}
			defer f.Close()
			io.Copy(c, f) // sendfile, as versitygw sends a whole object
		}()
	}
}

type root struct{ gofs.Inode }

func (r *root) OnAdd(ctx context.Context) {
	for i := 0; i < *nfiles; i++ {
		ch := r.NewPersistentInode(ctx, &file{}, gofs.StableAttr{Ino: uint64(2 + i)})
		r.AddChild("f"+strconv.Itoa(i), ch, false)
	}
}

type file struct{ gofs.Inode }

func (f *file) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444 | syscall.S_IFREG
	out.Size = uint64(size)
	return 0
}

func (f *file) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	c, err := net.Dial("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		return nil, 0, syscall.EIO
	}
	h := &handle{conn: c.(*net.TCPConn)}
	if *mode == "copy" {
		h.full = make(chan []byte, *ahead)
		h.free = make(chan []byte, *ahead+2)
		for i := 0; i < *ahead+2; i++ {
			h.free <- make([]byte, bufSize)
		}
		go h.fill()
	} else {
		p := make([]int, 2)
		if err := unix.Pipe2(p, unix.O_CLOEXEC); err != nil {
			return nil, 0, syscall.EIO
		}
		h.pr, h.pw = p[0], p[1]
		if _, err := unix.FcntlInt(uintptr(h.pw), unix.F_SETPIPE_SZ, 2*bufSize); err != nil {
			fmt.Fprintln(os.Stderr, "F_SETPIPE_SZ:", err)
		}
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

type handle struct {
	mu   sync.Mutex
	conn *net.TCPConn
	pos  int64
	// copy mode
	full, free chan []byte
	cur        []byte // the buffer being read from
	curOff     int
	// splice mode
	pr, pw int
}

// fill reads the socket into buffers ahead of the reader, as the daemon's
// whole-object stream fills blocks.
func (h *handle) fill() {
	defer close(h.full)
	for {
		b := <-h.free
		n, err := io.ReadFull(h.conn, b[:bufSize])
		if n > 0 {
			h.full <- b[:n]
		}
		if err != nil {
			return
		}
	}
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off != h.pos {
		fmt.Fprintln(os.Stderr, "not sequential", off, h.pos)
		return nil, syscall.EIO
	}
	n := int(min(int64(len(dest)), size-off))
	if n <= 0 {
		return fuse.ReadResultData(nil), 0
	}
	h.pos += int64(n)
	served.Add(int64(n))
	if *mode == "copy" {
		return h.readCopy(dest[:n])
	}
	return h.readSplice(n)
}

func (h *handle) readCopy(dest []byte) (fuse.ReadResult, syscall.Errno) {
	// Reply straight from the buffer when the request covers it, as the
	// daemon replies from its blocks; else gather into dest.
	if h.cur == nil || h.curOff == len(h.cur) {
		if h.cur != nil {
			h.free <- h.cur[:cap(h.cur)]
		}
		h.cur, h.curOff = <-h.full, 0
		if h.cur == nil {
			return nil, syscall.EIO
		}
	}
	if h.curOff == 0 && len(dest) == len(h.cur) {
		b := h.cur
		h.cur = nil
		return &bufResult{b: b, free: h.free}, 0
	}
	got := 0
	for got < len(dest) {
		if h.curOff == len(h.cur) {
			h.free <- h.cur[:cap(h.cur)]
			h.cur, h.curOff = <-h.full, 0
			if h.cur == nil {
				return nil, syscall.EIO
			}
		}
		c := copy(dest[got:], h.cur[h.curOff:])
		got += c
		h.curOff += c
	}
	return fuse.ReadResultData(dest), 0
}

// bufResult hands a filled buffer back once its reply is written.
type bufResult struct {
	b    []byte
	free chan []byte
}

func (r *bufResult) Bytes(buf []byte) ([]byte, fuse.Status) { return r.b, fuse.OK }
func (r *bufResult) Size() int                              { return len(r.b) }
func (r *bufResult) Done()                                  { r.free <- r.b[:cap(r.b)] }

func (h *handle) readSplice(n int) (fuse.ReadResult, syscall.Errno) {
	raw, err := h.conn.SyscallConn()
	if err != nil {
		return nil, syscall.EIO
	}
	got := 0
	var serr error
	err = raw.Read(func(fd uintptr) bool {
		for got < n {
			m, e := unix.Splice(int(fd), nil, h.pw, nil, n-got, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if e == unix.EAGAIN {
				return false // wait until the socket is readable
			}
			if e != nil {
				serr = e
				return true
			}
			if m == 0 {
				serr = io.ErrUnexpectedEOF
				return true
			}
			got += int(m)
		}
		return true
	})
	if err != nil || serr != nil {
		fmt.Fprintln(os.Stderr, "splice:", err, serr)
		return nil, syscall.EIO
	}
	return &pipeResult{h: h, n: n}, 0
}

// pipeResult is a reply whose n bytes wait in the handle's pipe: go-fuse
// splices them on into /dev/fuse (its statefulResult).
type pipeResult struct {
	h *handle
	n int
}

func (r *pipeResult) Stateful() (uintptr, int) { return uintptr(r.h.pr), r.n }
func (r *pipeResult) Size() int                { return r.n }
func (r *pipeResult) Done()                    {}
func (r *pipeResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	// Only if go-fuse could not splice: read the bytes out.
	b := make([]byte, r.n)
	if _, err := io.ReadFull(os.NewFile(uintptr(r.h.pr), "pipe"), b); err != nil {
		return nil, fuse.EIO
	}
	return b, fuse.OK
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.conn.Close()
	if h.pr != 0 {
		unix.Close(h.pr)
		unix.Close(h.pw)
	}
	return 0
}

func mount(mp string) {
	opts := &gofs.Options{MountOptions: fuse.MountOptions{
		MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, MaxBackground: 64, DirectMount: true,
		DisableSplice: *mode != "splice", ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		Options: []string{"ro"},
	}}
	srv, err := gofs.Mount(mp, &root{}, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "mounted")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; srv.Unmount() }()
	t0 := time.Now()
	srv.Wait()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	gb := float64(served.Load()) / 1e9
	fmt.Fprintf(os.Stderr, "mode %s: served %.3f GB, daemon CPU %.3f s/GB (%v over %v)\n",
		*mode, gb, cpu.Seconds()/gb, cpu.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}
