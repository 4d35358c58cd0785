package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// upload times multipart uploads of one object from a buffer in host
// memory: what the store takes for that shape with no filesystem between.
func upload(args []string) error {
	fs := flag.NewFlagSet("upload", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "S3 endpoint")
	bucket := fs.String("bucket", "", "bucket (created if missing)")
	key := fs.String("key", "s3load-upload", "object key (replaced each round, deleted at the end)")
	size := fs.Int64("size", 1<<30, "bytes of the object")
	part := fs.Int64("part", 16<<20, "part size, bytes")
	workers := fs.Int("workers", 4, "parts at once")
	rounds := fs.Int("rounds", 1, "uploads, one after another")
	unsigned := fs.Bool("unsigned", false, "send UNSIGNED-PAYLOAD instead of signing each part's body")
	withCRC := fs.Bool("crc32c", false, "with --unsigned, send each part's CRC32C in a trailer (aws-chunked), which the server checks")
	withMD5 := fs.Bool("md5", false, "with --unsigned, send each part's Content-MD5 (computed for every part, as the daemon's --write-checksum md5 does)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *part < 5<<20:
		return fmt.Errorf("--part %d: S3 takes parts of at least 5 MiB", *part)
	case *size < 1 || *workers < 1 || *rounds < 1:
		return fmt.Errorf("--size, --workers and --rounds must be positive")
	}
	cli, err := client(*endpoint, 0, false)
	if err != nil {
		return err
	}
	core := minio.Core{Client: cli}
	ctx := context.Background()
	if ok, _ := cli.BucketExists(ctx, *bucket); !ok {
		if err := cli.MakeBucket(ctx, *bucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	buf := make([]byte, *part)
	if _, err := io.ReadFull(testenv.RandomData(*part, 1), buf); err != nil {
		return err
	}
	type round struct {
		Seconds         float64 `json:"seconds"`
		GBps            float64 `json:"gbps"`
		PartsSeconds    float64 `json:"parts_seconds"`
		PartsGBps       float64 `json:"parts_gbps"`
		CompleteSeconds float64 `json:"complete_seconds"`
	}
	var out []round
	for range *rounds {
		start := time.Now()
		id, err := core.NewMultipartUpload(ctx, *bucket, *key, minio.PutObjectOptions{})
		if err != nil {
			return err
		}
		n := int((*size + *part - 1) / *part)
		parts := make([]minio.CompletePart, n)
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		var wg sync.WaitGroup
		errs := make(chan error, *workers)
		for range *workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					length := min(*part, *size-int64(i)**part)
					opts := minio.PutObjectPartOptions{DisableContentSha256: *unsigned}
					if *withCRC {
						sum := crc32.Checksum(buf[:length], crc32.MakeTable(crc32.Castagnoli))
						opts.Trailer = http.Header{"X-Amz-Checksum-Crc32c": {base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum))}}
					}
					if *withMD5 {
						sum := md5.Sum(buf[:length])
						opts.Md5Base64 = base64.StdEncoding.EncodeToString(sum[:])
					}
					p, err := core.PutObjectPart(ctx, *bucket, *key, id, i+1, bytes.NewReader(buf[:length]), length, opts)
					if err != nil {
						errs <- fmt.Errorf("part %d: %w", i+1, err)
						return
					}
					parts[i] = minio.CompletePart{PartNumber: i + 1, ETag: p.ETag}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			_ = core.AbortMultipartUpload(ctx, *bucket, *key, id)
			return err
		}
		partsDone := time.Now()
		if _, err := core.CompleteMultipartUpload(ctx, *bucket, *key, id, parts, minio.PutObjectOptions{}); err != nil {
			return err
		}
		end := time.Now()
		secs, ps := end.Sub(start).Seconds(), partsDone.Sub(start).Seconds()
		out = append(out, round{secs, float64(*size) / secs / 1e9, ps, float64(*size) / ps / 1e9, end.Sub(partsDone).Seconds()})
	}
	_ = cli.RemoveObject(ctx, *bucket, *key, minio.RemoveObjectOptions{})
	g := make([]float64, len(out))
	for i, r := range out {
		g[i] = r.GBps
	}
	sort.Float64s(g)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"size": *size, "part": *part, "workers": *workers, "unsigned": *unsigned, "md5": *withMD5, "crc32c": *withCRC,
		"median_gbps": g[len(g)/2], "rounds": out,
	})
}
