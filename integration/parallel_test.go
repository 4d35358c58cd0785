package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// A loader's way of reading one large file: 16 threads, each taking the
// next 32 MiB of the file and reading it with one pread, all on one
// descriptor. The kernel cuts each pread into 1 MiB reads, one at a time
// per thread, so the daemon sees 16 sequential readers interleaved; each
// is followed as a stream of its own and fed ahead by ranged GETs of a
// preadChunks reads size bytes of f as a parallel loader does: threads
// that each take the next chunk and read it with one pread. It returns the
// sha256 of what they read.
func preadChunks(t *testing.T, f *os.File, size, chunk int64, threads int) string {
	t.Helper()
	dst := make([]byte, size)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				off := next.Add(chunk) - chunk
				if off >= size {
					return
				}
				if n, err := f.ReadAt(dst[off:off+chunk], off); int64(n) != chunk {
					errs <- fmt.Errorf("pread of %d bytes at %d: %d bytes, %v", chunk, off, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := sha256.Sum256(dst)
	return hex.EncodeToString(got[:])
}

// part, not fetched 1 MiB at a time, and no byte comes from S3 twice.
func TestParallelPreadsOfOneFileAreFedAhead(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, chunk, threads = 512 << 20, 32 << 20, 16
	sum := srv.PutRandomObject(t, "data", "big.bin", size, 81)
	gets := &rangeLog{}
	// 1 MiB FUSE requests: each pread a run of many reads, as the test's
	// counts assume (with 4 MiB requests the runs are a quarter as long).
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) { c.FS.MaxRead = 1 << 20 },
		mounttest.WrapStore(func(s objstore.Store) objstore.Store { gets.Store = s; return gets }))
	f, err := os.Open(filepath.Join(mp, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gets.take() // the open's own requests
	readsBefore := metricSum(t, d, "posix_reads_total")
	bytesBefore := metricSum(t, d, "s3_received_bytes_total")

	if got := preadChunks(t, f, size, chunk, threads); got != sum {
		t.Fatalf("16 threads' preads: sha256 %s, want %s", got, sum)
	}

	reads := metricSum(t, d, "posix_reads_total") - readsBefore
	received := metricSum(t, d, "s3_received_bytes_total") - bytesBefore
	n := len(gets.take())
	t.Logf("%v FUSE reads, %d GETs, %v bytes received for %d", reads, n, received, size)
	if reads < size/(1<<20) {
		t.Fatalf("%v FUSE reads for %d bytes: the kernel's reads are larger than this test assumes", reads, size)
	}
	// One GET per 1 MiB read is what interleaved readers got without
	// streams of their own.
	if float64(n)*3 > reads {
		t.Errorf("%d GETs for %v FUSE reads: want under a third as many", n, reads)
	}
	if received > size*11/10 {
		t.Errorf("%v bytes received from S3 for a %d-byte object: want at most 1.1 times it", received, size)
	}
}

// A mapping of a large object faulted through in order by 4 threads, each
// its own quarter: the kernel's readahead for each arrives as a stream of
// its own, fed ahead by ranged GETs, every byte right.
func TestMmapReadByFourThreadsIsFedAhead(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 256 << 20
	sum := srv.PutRandomObject(t, "data", "map.bin", size, 82)
	gets := &rangeLog{}
	// 1 MiB requests and readahead: each thread's faults a run of many
	// reads, as the test's counts assume.
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) { c.FS.MaxRead, c.ReadAhead = 1<<20, 1<<20 },
		mounttest.WrapStore(func(s objstore.Store) objstore.Store { gets.Store = s; return gets }))
	path := filepath.Join(mp, "map.bin")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	gets.take()
	readsBefore := metricSum(t, d, "posix_reads_total")
	bytesBefore := metricSum(t, d, "s3_received_bytes_total")

	// The mapping is read by a child process: a fault on it must not wait
	// for a daemon the same runtime may stop (childMmapSHA256).
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// One P per thread: a thread in a fault holds its P.
	cmd.Env = append(os.Environ(), mmapThreadsEnv+"=4:"+path, "GOMAXPROCS=4")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Skip("this kernel refuses shared mappings of direct-I/O files (FUSE_DIRECT_IO_ALLOW_MMAP came with Linux 6.6)")
	}
	if err != nil {
		var stderr []byte
		if ee != nil {
			stderr = ee.Stderr
		}
		t.Fatalf("4 threads reading a mapping in a child: %v (%s)", err, stderr)
	}
	if got := strings.TrimSpace(string(out)); got != sum {
		t.Fatalf("4 threads reading a mapping: sha256 %s, want %s", got, sum)
	}

	reads := metricSum(t, d, "posix_reads_total") - readsBefore
	received := metricSum(t, d, "s3_received_bytes_total") - bytesBefore
	n := len(gets.take())
	t.Logf("%v FUSE reads, %d GETs, %v bytes received for %d", reads, n, received, size)
	if float64(n)*3 > reads {
		t.Errorf("%d GETs for %v FUSE reads: want under a third as many", n, reads)
	}
	if received > size*11/10 {
		t.Errorf("%v bytes received from S3 for a %d-byte object: want at most 1.1 times it", received, size)
	}
}

// A mapping copied out from its end down, a page at a time, as glibc's
// memmove copies when the destination lies above the source: each fault's
// read-around then reads the pages just below those read, and the reads
// come as a stream going backward, fed ahead below it by ranged GETs
// rather than a GET each, every byte right.
func TestMmapReadBackwardIsFedAhead(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 64 << 20
	sum := srv.PutRandomObject(t, "data", "back.bin", size, 83)
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) { c.FS.MaxRead, c.ReadAhead = 1<<20, 1<<20 })
	path := filepath.Join(mp, "back.bin")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	readsBefore := metricSum(t, d, "posix_reads_total")
	getsBefore := metricAt(t, d, "s3_requests_total", "get,ok")
	bytesBefore := metricSum(t, d, "s3_received_bytes_total")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mmapThreadsEnv+"=back:"+path)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Skip("this kernel refuses shared mappings of direct-I/O files (FUSE_DIRECT_IO_ALLOW_MMAP came with Linux 6.6)")
	}
	if err != nil {
		t.Fatalf("a mapping copied backward in a child: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != sum {
		t.Fatalf("a mapping copied backward: sha256 %s, want %s", got, sum)
	}
	reads := metricSum(t, d, "posix_reads_total") - readsBefore
	gets := metricAt(t, d, "s3_requests_total", "get,ok") - getsBefore
	received := metricSum(t, d, "s3_received_bytes_total") - bytesBefore
	t.Logf("%v FUSE reads, %v GETs, %v bytes received for %d", reads, gets, received, size)
	if gets*3 > reads {
		t.Errorf("%v GETs for %v FUSE reads: want under a third as many", gets, reads)
	}
	if received > size*11/10 {
		t.Errorf("%v bytes received from S3 for a %d-byte object: want at most 1.1 times it", received, size)
	}
}

// mmapThreadsEnv asks the test binary, started as a child, to read a file
// through a shared mapping with threads (THREADS:PATH), or from its end
// down a page at a time (back:PATH), and print its sha256
// (childMmapThreads).
const mmapThreadsEnv = "S3GDSFS_TEST_MMAP_THREADS"

func init() {
	if v := os.Getenv(mmapThreadsEnv); v != "" {
		os.Exit(childMmapThreads(v))
	}
}

// childMmapThreads maps the file and has each of its threads copy its own
// contiguous share of the mapping out in order, 1 MiB at a time; exit 3:
// the kernel refuses the mapping.
func childMmapThreads(arg string) int {
	n, path, _ := strings.Cut(arg, ":")
	threads, err := strconv.Atoi(n)
	if n == "back" {
		threads, err = 1, nil
	}
	if err != nil || threads < 1 {
		fmt.Fprintln(os.Stderr, "bad", mmapThreadsEnv, arg)
		return 1
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	size := int(st.Size())
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		if errors.Is(err, syscall.ENODEV) {
			return 3
		}
		return 2
	}
	defer syscall.Munmap(data)
	dst := make([]byte, size)
	if n == "back" {
		for pos := (size - 1) / 4096 * 4096; pos >= 0; pos -= 4096 {
			copy(dst[pos:min(pos+4096, size)], data[pos:min(pos+4096, size)])
		}
		sum := sha256.Sum256(dst)
		fmt.Println(hex.EncodeToString(sum[:]))
		return 0
	}
	share := (size + threads - 1) / threads
	var wg sync.WaitGroup
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lo, hi := min(i*share, size), min((i+1)*share, size)
			for pos := lo; pos < hi; pos += 1 << 20 {
				end := min(pos+1<<20, hi)
				copy(dst[pos:end], data[pos:end])
			}
		}()
	}
	wg.Wait()
	sum := sha256.Sum256(dst)
	fmt.Println(hex.EncodeToString(sum[:]))
	return 0
}
