// Command s3load uploads generated objects and measures raw minio-go GETs,
// the reference the GPU benchmarks divide by. It is built statically and
// carried to machines without Go.
//
//	s3load put --endpoint URL --bucket B --prefix P --count N --size BYTES [--seed S]
//	s3load upload --endpoint URL --bucket B --key K --size BYTES --part BYTES --workers W
//	           [--rounds R] [--unsigned [--md5]]
//	s3load get --endpoint URL --bucket B --keys k1,k2,... --workers W [--seconds T]
//	           [--ring N | --device GPU [--device-copy=false] [--slot-size BYTES]
//	           [--copy-streams N]] [--part BYTES] [--read-buffer BYTES]
//
// With --device each body lands in a device buffer of its worker through
// pinned slots, as the daemon's GPU path does (device.go): the bound of that
// design without the daemon.
//
// upload is the reference for writes: one multipart upload of --size bytes
// from host memory, --workers parts at once, the time of the parts and of
// the completion (a server may copy every part then) given apart.
//
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
// Output is one JSON object on stdout.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: s3load put|get|upload [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "put":
		err = put(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	case "upload":
		err = upload(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: use put, get or upload", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3load:", err)
		os.Exit(1)
	}
}

// client is a path-style client. Uploads take a connection per request
// (keep false): versitygw with --keep-alive has closed a kept connection
// under a PUT's body.
func client(endpoint string, readBuffer int, keep bool) (*minio.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("--endpoint %q: want http://host:port", endpoint)
	}
	var transport http.RoundTripper
	if readBuffer > 0 || !keep {
		t, err := minio.DefaultTransport(u.Scheme == "https")
		if err != nil {
			return nil, err
		}
		if readBuffer > 0 {
			t.ReadBufferSize = readBuffer
		}
		t.DisableKeepAlives = !keep
		transport = t
	}
	return minio.New(u.Host, &minio.Options{
		Transport:    transport,
		Creds:        credentials.NewStaticV4(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
		Secure:       u.Scheme == "https",
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	})
}

func put(args []string) error {
	fs := flag.NewFlagSet("put", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "S3 endpoint")
	bucket := fs.String("bucket", "", "bucket (created if missing)")
	prefix := fs.String("prefix", "obj-", "key prefix")
	count := fs.Int("count", 1, "objects")
	size := fs.Int64("size", 1<<20, "bytes per object")
	seed := fs.Int64("seed", 1, "first seed; object i uses seed+i")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cli, err := client(*endpoint, 0, false)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if ok, _ := cli.BucketExists(ctx, *bucket); !ok {
		if err := cli.MakeBucket(ctx, *bucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	type obj struct {
		Key    string `json:"key"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	}
	out := make([]obj, *count)
	var wg sync.WaitGroup
	errs := make(chan error, *count)
	for i := range *count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%s%04d", *prefix, i)
			h := sha256.New()
			r := io.TeeReader(testenv.RandomData(*size, *seed+int64(i)), h)
			if _, err := cli.PutObject(ctx, *bucket, key, r, *size, minio.PutObjectOptions{PartSize: 64 << 20}); err != nil {
				errs <- err
				return
			}
			out[i] = obj{key, *size, hex.EncodeToString(h.Sum(nil))}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"objects": out})
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "S3 endpoint")
	bucket := fs.String("bucket", "", "bucket")
	keys := fs.String("keys", "", "comma-separated keys, read whole, round robin")
	workers := fs.Int("workers", 8, "concurrent GETs")
	seconds := fs.Float64("seconds", 10, "how long to read")
	ring := fs.Int("ring", 0, "read into a ring of this many 1 MiB buffers, one after another, as the daemon fills its blocks (0: one reused 4 MiB buffer)")
	part := fs.Int64("part", 0, "GET ranges of this many bytes, each object's in turn, as the GPU path's parts are (0: whole objects)")
	device := fs.Int("device", -1, "land each body in a device buffer of its worker on this GPU, through pinned slots as the daemon's GPU path does (-1: host memory only)")
	deviceCopy := fs.Bool("device-copy", true, "with --device, copy the slots to the device (false: fill the pinned slots only)")
	readBuffer := fs.Int("read-buffer", 0, "the HTTP connection's read buffer in bytes (0: Go's default; the daemon's is 262144)")
	var shape stagingShape
	fs.IntVar(&shape.slotSize, "slot-size", 4<<20, "with --device, bytes per pinned slot (the daemon's --staging-slot-size)")
	fs.IntVar(&shape.copyStreams, "copy-streams", 8, "with --device, CUDA streams the GETs' copies share")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := shape.check(); err != nil {
		return err
	}
	if *part < 0 {
		return fmt.Errorf("--part %d: want 0 (whole objects) or a range size in bytes", *part)
	}
	if *readBuffer < 0 {
		return fmt.Errorf("--read-buffer %d: want 0 (Go's default) or a size in bytes", *readBuffer)
	}
	cli, err := client(*endpoint, *readBuffer, true)
	if err != nil {
		return err
	}
	plan, err := planGets(cli, *bucket, strings.Split(*keys, ","), *part)
	if err != nil {
		return err
	}
	var sink *deviceSink
	if *device >= 0 {
		if *ring > 0 {
			return fmt.Errorf("--ring and --device: choose one destination")
		}
		size, err := largestGet(cli, *bucket, plan)
		if err != nil {
			return err
		}
		if sink, err = newDeviceSink(*device, *workers, size, *deviceCopy, shape); err != nil {
			return err
		}
		defer sink.Close()
	}
	var total, ops atomic.Int64
	var next atomic.Int64
	// Every worker's buffers are made and touched before the clock starts:
	// a ring's first touch is page faults, not reading.
	bufs, rings := make([][]byte, *workers), make([][][]byte, *workers)
	for w := range *workers {
		bufs[w] = touched(4 << 20)
		for range *ring {
			rings[w] = append(rings[w], touched(1<<20))
		}
	}
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for w := range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, ringBufs := bufs[w], rings[w]
			for time.Now().Before(deadline) {
				g := plan[int(next.Add(1)-1)%len(plan)]
				var opts minio.GetObjectOptions
				if g.end > 0 {
					if err := opts.SetRange(g.off, g.end-1); err != nil {
						errs <- err
						return
					}
				}
				obj, err := cli.GetObject(context.Background(), *bucket, g.key, opts)
				if err != nil {
					errs <- err
					return
				}
				var n int64
				switch {
				case sink != nil:
					n, err = sink.read(w, obj)
				case *ring > 0:
					n, err = readIntoRing(obj, ringBufs)
				default:
					n, err = discard(obj, buf)
				}
				obj.Close()
				if err != nil {
					errs <- err
					return
				}
				total.Add(n)
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"workers": *workers, "bytes": total.Load(), "ops": ops.Load(), "seconds": el,
		"gbps": float64(total.Load()) / el / 1e9, "ops_per_s": float64(ops.Load()) / el,
	})
}

// readIntoRing reads r to the end, 1 MiB at a time, into the next buffer of
// the ring each time: the destination is cold once the ring outgrows the
// CPU's caches, as the daemon's block memory is.
func readIntoRing(r io.Reader, ring [][]byte) (int64, error) {
	var n int64
	for i := 0; ; i = (i + 1) % len(ring) {
		m, err := io.ReadFull(r, ring[i])
		n += int64(m)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// getRange is one GET of a run: a key and, with --part, a range of it.
type getRange struct {
	key      string
	off, end int64 // [off, end); end 0 for the whole object
}

// planGets lists a run's GETs in order, taken round robin: each object
// whole, or with part > 0 each of its ranges of that many bytes, one
// object's after another.
func planGets(cli *minio.Client, bucket string, keys []string, part int64) ([]getRange, error) {
	var plan []getRange
	for _, key := range keys {
		if part == 0 {
			plan = append(plan, getRange{key: key})
			continue
		}
		st, err := cli.StatObject(context.Background(), bucket, key, minio.StatObjectOptions{})
		if err != nil {
			return nil, err
		}
		for off := int64(0); off < st.Size; off += part {
			plan = append(plan, getRange{key: key, off: off, end: min(off+part, st.Size)})
		}
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("--keys %q: nothing to read", strings.Join(keys, ","))
	}
	return plan, nil
}

// largestGet is the size of the largest body of plan, for the device
// buffers.
func largestGet(cli *minio.Client, bucket string, plan []getRange) (int64, error) {
	var largest int64
	for _, g := range plan {
		if g.end > 0 {
			largest = max(largest, g.end-g.off)
			continue
		}
		st, err := cli.StatObject(context.Background(), bucket, g.key, minio.StatObjectOptions{})
		if err != nil {
			return 0, err
		}
		largest = max(largest, st.Size)
	}
	return largest, nil
}

// touched is a buffer of n bytes whose pages are all in memory.
func touched(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return b
}

// discard reads r to the end in reads of len(buf), as a client that wants
// the bytes does. (io.Copy into io.Discard would read in io.Discard's own
// 8 KiB buffers, whatever buffer it is given: minio-go's reads at that size
// took half the rate a raw reference should have.)
func discard(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
