// Command s3gdsfs-demo shows s3gdsfs end to end on one machine with
// nothing but the build: an S3 server of its own on loopback (gofakes3,
// files in a temporary directory) filled with a generated dataset, a
// mount of it, every file read back and checked, GPU reads through the
// ioctl (host memory stands in for device buffers, RDMA is the in-process
// loopback fabric), and the daemon's counters.
//
//	s3gdsfs-demo [--once] [--mountpoint DIR] [--big-size SIZE] [--metrics-addr ADDR] [--log-level LEVEL]
//
// It is a program of its own so that s3gdsfs, the command, links no S3
// server. `make demo` builds and runs it.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/minio/minio-go/v7"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/cli"
	"github.com/s3gdsfs/s3gdsfs/internal/setting"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
)

// The demo's credentials only guard an endpoint on loopback that lives as
// long as the demo; they are never printed.
const (
	demoAccess = "demo-access"
	demoSecret = "demo-secret-not-for-production"
	demoBucket = "demo"
)

func main() {
	os.Exit(cli.ExitCode("s3gdsfs-demo", run(os.Args[1:])))
}

func run(args []string) error {
	fset := flag.NewFlagSet("s3gdsfs-demo", flag.ContinueOnError)
	once := fset.Bool("once", false, "exit after the checks instead of staying mounted")
	mountpoint := fset.String("mountpoint", "", "where to mount (default: a new temporary directory)")
	bigSize := cli.Size(256 << 20)
	// Objects go up in one PUT (see fillDemoBucket), so S3's 5 GiB limit holds.
	fset.Var(&bigSize, "big-size", "size of the large sample file")
	metricsAddr := fset.String("metrics-addr", daemon.DefaultMetricsAddr, "listen address of /metrics ('off' disables it)")
	logLevel := fset.String("log-level", "warn", "debug, info, warn or error")
	if err := fset.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return cli.UsageError{Err: err}
	}
	if fset.NArg() > 0 {
		return cli.Usagef("s3gdsfs-demo takes no arguments, got %q", fset.Args())
	}
	if bigSize < 1 || bigSize > 5<<30 {
		return cli.Usagef("--big-size %s: between 1 byte and 5GiB", bigSize.String())
	}
	log, err := cli.NewLogger(*logLevel, "")
	if err != nil {
		return err
	}
	if err := cli.RaisePipeLimitAndRestart(log, false, daemon.Default().FS.MaxRead); err != nil {
		return err
	}

	work, err := os.MkdirTemp("", "s3gdsfs-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step("starting an embedded S3 endpoint (gofakes3, files under %s) on loopback", work)
	endpoint, stop, err := startDemoS3(filepath.Join(work, "store"))
	if err != nil {
		return err
	}
	defer stop()

	step("filling bucket %q with a generated dataset", demoBucket)
	want, err := fillDemoBucket(endpoint, int64(bigSize))
	if err != nil {
		return err
	}

	mp := *mountpoint
	if mp == "" {
		mp = filepath.Join(work, "mnt")
		if err := os.Mkdir(mp, 0o755); err != nil {
			return err
		}
	}
	maddr := *metricsAddr
	if maddr == "off" {
		maddr = ""
	}
	cfg := daemon.Default()
	cfg.Mountpoint = mp
	cfg.S3.Endpoint, cfg.S3.Credentials = endpoint, daemon.StaticCredentials(demoAccess, demoSecret)
	cfg.Metrics.Addr = maddr
	cfg.Log = log
	cfg.Core.Bucket = demoBucket
	// GPU reads in the demo run anywhere: host memory files stand in for
	// device buffers, and the loopback fabric emulates RDMA writes in
	// process. Both are named as such wherever they are reported.
	// The demo holds the fabric to have it decline one read.
	cfg.GPU.Mode, cfg.GPU.StandinDir, cfg.GPU.RDMA = "host-standin", work, "loopback"
	fabric := loopback.NewFabric()
	d, err := daemon.Start(cfg, daemon.WithFabric(fabric))
	var se *setting.Error
	if maddr != "" && errors.As(err, &se) && se.Name == "Metrics.Addr" {
		cfg.Metrics.Addr = "127.0.0.1:0" // the default port is taken: any port will do
		d, err = daemon.Start(cfg, daemon.WithFabric(fabric))
	}
	if err != nil {
		return err
	}
	mounted := true
	defer func() {
		if mounted {
			d.Unmount()
		}
	}()
	step("mounted s3://%s at %s", demoBucket, mp)

	printTree(mp)
	if err := verifyDemo(mp, want); err != nil {
		return err
	}
	if err := demoGPUReads(fabric, mp, work, want); err != nil {
		return err
	}
	printCounters(d)
	if !*once {
		// Only while the program stays up is there anything at the address.
		if d.MetricsAddr() != "" {
			fmt.Printf("\nPrometheus metrics: http://%s/metrics\n", d.MetricsAddr())
		}
		fmt.Printf("\nThe mount stays at %s; try: ls %s  |  getfattr -d -m user.s3gdsfs %s\nPress Ctrl-C to unmount and exit.\n", mp, mp, mp)
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		<-sigs
	}
	mounted = false
	return d.Unmount()
}

func step(format string, a ...any) { fmt.Printf("==> "+format+"\n", a...) }

func startDemoS3(dir string) (string, func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	base, err := s3afero.FsPath(dir, s3afero.FsPathCreateAll)
	if err != nil {
		return "", nil, err
	}
	backend, err := s3afero.MultiBucket(base)
	if err != nil {
		return "", nil, err
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// fillDemoBucket uploads the sample dataset and returns each file's path in
// the mount with its sha256.
func fillDemoBucket(endpoint string, bigSize int64) (map[string]string, error) {
	ctx := context.Background()
	cli, err := minio.New(strings.TrimPrefix(endpoint, "http://"), &minio.Options{
		Creds: daemon.StaticCredentials(demoAccess, demoSecret), Region: "us-east-1", BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, err
	}
	if err := cli.MakeBucket(ctx, demoBucket, minio.MakeBucketOptions{}); err != nil {
		return nil, err
	}
	want := map[string]string{}
	put := func(key string, r io.Reader, size int64) error {
		h := sha256.New()
		// One PUT per object: the embedded endpoint mis-stores signed
		// multipart uploads, and the demo's objects are small enough.
		part := uint64(max(size, 16<<20))
		_, err := cli.PutObject(ctx, demoBucket, key, io.TeeReader(r, h), size, minio.PutObjectOptions{PartSize: part})
		if err != nil {
			return fmt.Errorf("upload %s: %w", key, err)
		}
		want[key] = hex.EncodeToString(h.Sum(nil))
		return nil
	}
	rng := rand.New(rand.NewChaCha8([32]byte{'s', '3', 'g', 'd', 's'}))
	for shard := range 4 {
		for i := range 50 {
			size := 4<<10 + rng.IntN(60<<10)
			buf := make([]byte, size)
			fillRandom(rng, buf)
			if err := put(fmt.Sprintf("train/shard-%02d/sample-%04d.bin", shard, i), bytes.NewReader(buf), int64(size)); err != nil {
				return nil, err
			}
		}
	}
	labels := "file,label\n"
	for i := range 50 {
		labels += fmt.Sprintf("train/shard-00/sample-%04d.bin,%d\n", i, i%10)
	}
	if err := put("val/labels.csv", strings.NewReader(labels), int64(len(labels))); err != nil {
		return nil, err
	}
	if err := put("deep/a/b/c/d/e/f/g/h/readme.txt", strings.NewReader("eight levels down\n"), 18); err != nil {
		return nil, err
	}
	if err := put("models/checkpoint.bin", &randomReader{rng: rng, left: bigSize}, bigSize); err != nil {
		return nil, err
	}
	return want, nil
}

func fillRandom(rng *rand.Rand, p []byte) {
	for i := 0; i+8 <= len(p); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(p) &^ 7; i < len(p); i++ {
		p[i] = byte(rng.Uint32())
	}
}

type randomReader struct {
	rng  *rand.Rand
	left int64
}

func (r *randomReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	fillRandom(r.rng, p)
	r.left -= int64(len(p))
	return len(p), nil
}

// printTree lists the mount's directories, each with the files under it
// (in it and below) and their size; the top line is the mount itself.
func printTree(root string) {
	step("the mount's tree (each directory with the files under it)")
	type dir struct {
		rel          string
		files, bytes int64
	}
	var dirs []*dir
	byPath := map[string]*dir{}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Printf("    %s: %v\n", path, err)
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			e := &dir{rel: rel}
			dirs = append(dirs, e)
			byPath[rel] = e
			return nil
		}
		var size int64
		if info, err := d.Info(); err == nil {
			size = info.Size()
		}
		for p := filepath.Dir(rel); ; p = filepath.Dir(p) {
			if e := byPath[p]; e != nil {
				e.files++
				e.bytes += size
			}
			if p == "." {
				break
			}
		}
		return nil
	})
	for _, e := range dirs {
		name, depth := root, 0
		if e.rel != "." {
			name, depth = filepath.Base(e.rel), strings.Count(e.rel, string(filepath.Separator))+1
		}
		fmt.Printf("    %s%s/  %s, %s\n", strings.Repeat("  ", depth), name, plural(e.files, "file"), humanBytes(e.bytes))
	}
}

// plural is n and the noun, with an s unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func verifyDemo(mp string, want map[string]string) error {
	step("reading every file through the mount and checking its sha256")
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var total int64
	bad := 0
	start := time.Now()
	for _, k := range keys {
		t0 := time.Now()
		f, err := os.Open(filepath.Join(mp, k))
		if err != nil {
			return err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		total += n
		got := hex.EncodeToString(h.Sum(nil))
		if got != want[k] {
			bad++
			fmt.Printf("    MISMATCH %s: sha256 %s, uploaded %s\n", k, got, want[k])
		} else if n >= 1<<20 {
			el := time.Since(t0)
			fmt.Printf("    ok  %-40s %s in %s (%.2f GB/s), sha256 %s…\n", k, humanBytes(n), el.Round(time.Millisecond), float64(n)/el.Seconds()/1e9, got[:16])
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d files did not match what was uploaded", bad, len(keys))
	}
	fmt.Printf("    ok  all %d files byte-exact (%s in %s)\n", len(keys), humanBytes(total), time.Since(start).Round(time.Millisecond))
	return nil
}

// printCounters shows the daemon's own counters, the same ones
// /metrics and the stats extended attribute carry.
func printCounters(d *daemon.Daemon) {
	step("counters")
	snap, err := d.Metrics.Snapshot()
	if err != nil {
		fmt.Println("    ", err)
		return
	}
	names := []string{"s3_requests_total", "s3_received_bytes_total", "posix_read_bytes_total", "posix_reads_total",
		"read_streams_total", "read_stream_ends_total", "splice_bytes_total", "splice_ends_total", "block_cache_hits_total", "block_cache_misses_total", "meta_cache_hits_total", "meta_cache_misses_total",
		"skipped_keys_total", "block_memory_bytes", "block_memory_limit_bytes",
		"gpu_read_bytes_total", "gpu_reads_total", "gpu_declined_total", "gpu_declined_bytes_total"}
	for _, n := range names {
		v, ok := snap[n]
		if !ok {
			continue
		}
		b, _ := json.Marshal(v)
		fmt.Printf("    s3gdsfs_%-28s %s\n", n, b)
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// demoGPUReads issues GPU reads through the ioctl, as a PyTorch process
// would, into host stand-in buffers: one carried by the loopback RDMA
// fabric, one the fabric declines (server 501) so it falls back to HTTP.
func demoGPUReads(fabric *loopback.Fabric, mp, work string, want map[string]string) error {
	step("GPU reads through the ioctl (no GPU needed here: host buffers stand in for device memory; RDMA is the loopback fabric, an in-process emulation)")
	read := func(key string, decline bool) error {
		info, err := os.Stat(filepath.Join(mp, key))
		if err != nil {
			return err
		}
		// A buffer per read, as a new allocation has a new IPC handle: the
		// daemon keeps its import of a name until the file read through is
		// released, which the kernel sends after close returns, so a name
		// used again at once could still be the previous, deleted buffer.
		buf := "demo-gpu-buffer-" + strings.ReplaceAll(key, "/", "-")
		if err := os.WriteFile(filepath.Join(work, buf), make([]byte, info.Size()), 0o600); err != nil {
			return err
		}
		defer os.Remove(filepath.Join(work, buf))
		if decline {
			fabric.SetModeFor(loopback.Decline501, 1)
		}
		f, err := os.Open(filepath.Join(mp, key))
		if err != nil {
			return err
		}
		defer f.Close()
		req := abi.NewReadRequest()
		req.Flags = abi.FlagHostBuffer
		req.Length = uint64(info.Size())
		copy(req.IPCHandle[:], buf)
		res, err := s3gds.Read(f, &req)
		if err != nil {
			return fmt.Errorf("GPU read of %s: %w", key, err)
		}
		got, err := os.ReadFile(filepath.Join(work, buf))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(got[:res.Bytes])
		ok := "ok "
		if hex.EncodeToString(sum[:]) != want[key] {
			ok = "BAD"
		}
		why := ""
		if decline {
			why = " (deliberate: the demo told the fabric to decline this read, to show the fallback to HTTP)"
		}
		fmt.Printf("    %s %-32s %s via %s (rdma %s, http %s), %s, decline: %s%s\n", ok, key, humanBytes(int64(res.Bytes)),
			res.Transport, humanBytes(int64(res.RDMABytes)), humanBytes(int64(res.HTTPBytes)), res.Elapsed.Round(time.Microsecond), res.Decline, why)
		if ok != "ok " {
			return fmt.Errorf("GPU read of %s: bytes differ from what was uploaded", key)
		}
		return nil
	}
	if err := read("models/checkpoint.bin", false); err != nil {
		return err
	}
	return read("val/labels.csv", true)
}
