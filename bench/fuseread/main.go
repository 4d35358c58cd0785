// fuseread is the ceiling of a FUSE mount for readers, with no S3 behind it: one file, f, of
// --size bytes held in memory and served with direct I/O by go-fuse as s3gdsfs's replies are
// (one writev from memory, or with --mode splice spliced from a memfd holding the same bytes),
// with requests of up to --max-read bytes. Whatever readers reach through it is the most they
// can reach through any FUSE filesystem on that machine (docs/benchmarks.md); its byte at
// offset i is byte(i*7), or with --file the bytes of that file (a checkpoint, for loaders that
// parse what they read). As s3gdsfs's large files, f may be mapped although opened with direct
// I/O (kernel 6.6 and later), a mapping's faults then reaching it through the page cache, in
// requests as large as the mount's kernel readahead (--read-ahead, as root): the ceiling of
// readers of a mapping (safetensors.torch.load_file).
//
//	fuseread [--size BYTES | --file PATH] [--max-read BYTES] [--mode writev|splice] [--read-ahead BYTES] [--poll DURATION] MOUNTPOINT
//
// It waits for requests as the daemon does by default (--poll: the thread
// that has just replied polls /dev/fuse for 1 ms with 8 CPUs or more), so
// that its figure bounds the mount's.
//
// It serves until SIGINT or SIGTERM. Above 1 MiB, --max-read needs fs.fuse.max_pages_limit
// raised (as root: sysctl fs.fuse.max_pages_limit=N pages).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"golang.org/x/sys/unix"
)

var (
	data  []byte
	memfd int
	mode  string
)

type root struct{ fs.Inode }

func (r *root) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, &file{}, fs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild("f", ch, false)
}

type file struct{ fs.Inode }

func (f *file) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444
	out.Size = uint64(len(data))
	return 0
}

func (f *file) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *file) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	end := min(off+int64(len(dest)), int64(len(data)))
	if off >= end {
		return fuse.ReadResultData(nil), 0
	}
	if mode == "splice" {
		return fuse.ReadResultFd(uintptr(memfd), off, int(end-off)), 0
	}
	return fuse.ReadResultData(data[off:end]), 0
}

func main() {
	size := flag.Int64("size", 512<<20, "")
	flag.StringVar(&mode, "mode", "writev", "writev or splice")
	maxRead := flag.Int("max-read", 1<<20, "")
	from := flag.String("file", "", "serve this file's bytes instead of the pattern")
	readAhead := flag.Int64("read-ahead", 0, "the mount's kernel readahead in bytes (0: the kernel's)")
	poll := flag.Duration("poll", daemon.Default().FS.PollRequests, "how long a thread that has just replied polls for the next request (0: a blocking read), as the daemon's --fuse-poll")
	flag.Parse()
	if flag.NArg() != 1 || *size <= 0 || (mode != "writev" && mode != "splice") {
		log.Fatal("usage: fuseread [--size BYTES | --file PATH] [--max-read BYTES] [--mode writev|splice] [--read-ahead BYTES] [--poll DURATION] MOUNTPOINT")
	}
	var err error
	if *from != "" {
		if data, err = os.ReadFile(*from); err != nil {
			log.Fatal(err)
		}
	} else {
		data = make([]byte, *size)
		for i := range data {
			data[i] = byte(i * 7)
		}
	}
	memfd, err = unix.MemfdCreate("blocks", 0)
	if err != nil {
		log.Fatal(err)
	}
	// One write moves at most 2 GiB: write until the memfd holds it all,
	// else splices past that end come back short and a mapping's reader
	// gets SIGBUS.
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(memfd, data[off:], int64(off))
		if err != nil {
			log.Fatal(err)
		}
		off += n
	}
	opts := &fs.Options{MountOptions: fuse.MountOptions{MaxWrite: *maxRead, MaxReadAhead: *maxRead, DirectMount: true, MaxBackground: 64,
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP, PollRequests: *poll}}
	srv, err := fs.Mount(flag.Arg(0), &root{}, opts)
	if err != nil {
		log.Fatal(err)
	}
	if *readAhead > 0 {
		// As s3gdsfs does: the mount's backing device in sysfs takes what
		// FUSE caps at mount time.
		var st unix.Stat_t
		if err := unix.Stat(flag.Arg(0), &st); err != nil {
			log.Fatal(err)
		}
		ra := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
		if err := os.WriteFile(ra, []byte(strconv.FormatInt(*readAhead>>10, 10)), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("serving %s/f: %d bytes, replies by %s, reads of up to %d bytes, kernel readahead %d, polling %v", flag.Arg(0), len(data), mode, *maxRead, *readAhead, *poll)
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() { <-c; srv.Unmount() }()
	srv.Wait()
}
