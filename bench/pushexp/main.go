// Command pushexp measures, without S3, how fast one reader reads a FUSE
// file whose bytes the daemon already holds in memory: answered with direct
// I/O, answered into the page cache through the kernel's readahead, or
// written into the page cache ahead of the reader (FUSE_NOTIFY_STORE) by a
// few goroutines. It is the experiment behind vfs/push.go
// (docs/results/push-experiment-h200.txt; scripts/gpu/push_experiment.sh).
//
//	pushexp -mode direct|pagecache|push [-workers N] [-ahead BYTES] [-poll DURATION] MOUNTPOINT
//
// It serves one file, "f", until SIGINT.
package main

import (
	"context"
	"crypto/md5"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var (
	mode    = flag.String("mode", "direct", "direct|pagecache|push")
	size    = flag.Int64("size", 1<<30, "file size")
	workers = flag.Int("workers", 4, "push workers")
	chunk   = flag.Int("chunk", 1<<20, "push chunk")
	ahead   = flag.Int64("ahead", 0, "push no further than this past the last read request (0 = all)")
	ra      = flag.Int("readahead", 1<<20, "max readahead")
	poll    = flag.Duration("poll", 0, "poll /dev/fuse for this long after each request before sleeping (MountOptions.PollRequests, --fuse-poll)")
	hot     = flag.Bool("hot", false, "push from one small buffer that stays in the CPU's cache (the bytes pushed are then wrong: for the push rate only)")
)

var data []byte
var theFile *file

type root struct{ gofs.Inode }

func (r *root) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, theFile, gofs.StableAttr{Ino: 2})
	r.AddChild("f", ch, false)
}

type file struct {
	gofs.Inode
	once    sync.Once
	lastOff atomic.Int64
	wake    chan struct{}
	reads   atomic.Int64
	rbytes  atomic.Int64
}

func (f *file) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444 | syscall.S_IFREG
	out.Size = uint64(len(data))
	return 0
}

func (f *file) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	switch *mode {
	case "direct":
		return nil, fuse.FOPEN_DIRECT_IO, 0
	case "push":
		return nil, fuse.FOPEN_KEEP_CACHE, 0
	}
	return nil, 0, 0
}

func (f *file) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.reads.Add(1)
	end := min(off+int64(len(dest)), int64(len(data)))
	if off >= end {
		return fuse.ReadResultData(nil), 0
	}
	f.rbytes.Add(end - off)
	for {
		old := f.lastOff.Load()
		if end <= old || f.lastOff.CompareAndSwap(old, end) {
			break
		}
	}
	if *mode == "push" {
		f.once.Do(func() { go f.push() })
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	return fuse.ReadResultData(data[off:end]), 0
}

func (f *file) push() {
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				off := next.Add(int64(*chunk)) - int64(*chunk)
				if off >= int64(len(data)) {
					return
				}
				for *ahead > 0 && off > f.lastOff.Load()+*ahead {
					mu.Lock()
					select {
					case <-f.wake:
					case <-time.After(time.Millisecond):
					}
					mu.Unlock()
				}
				end := min(off+int64(*chunk), int64(len(data)))
				src := data[off:end]
				if *hot {
					src = data[:end-off]
				}
				if e := f.WriteCache(off, src); e != 0 {
					fmt.Fprintln(os.Stderr, "store", off, e)
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	fmt.Fprintf(os.Stderr, "pushed %d bytes in %v: %.2f GB/s\n", len(data), d, float64(len(data))/d.Seconds()/1e9)
}

func main() {
	flag.Parse()
	data = make([]byte, *size)
	x := uint64(88172645463325252)
	for i := 0; i+8 <= len(data); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for b := 0; b < 8; b++ {
			data[i+b] = byte(x >> (8 * b))
		}
	}
	fmt.Fprintf(os.Stderr, "md5 %x\n", md5.Sum(data))
	theFile = &file{wake: make(chan struct{}, 1)}
	r := &root{}
	opts := &gofs.Options{MountOptions: fuse.MountOptions{
		MaxWrite: 1 << 20, MaxReadAhead: *ra, MaxBackground: 64, DirectMount: true,
		DisableSplice: true, ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		Options: []string{"ro"}, PollRequests: *poll,
	}}
	srv, err := gofs.Mount(flag.Arg(0), r, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "mounted")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; srv.Unmount() }()
	srv.Wait()
	fmt.Fprintf(os.Stderr, "read requests %d, %d bytes\n", theFile.reads.Load(), theFile.rbytes.Load())
}
