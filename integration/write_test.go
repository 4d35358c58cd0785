package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// writable mounts bucket with writes allowed, parts of partSize, and
// tune's changes.
func writable(t *testing.T, srv *testenv.Server, bucket string, partSize int64, tune func(*daemon.Config)) (string, *daemon.Daemon) {
	t.Helper()
	return mountOf(t, srv, bucket, func(c *daemon.Config) {
		c.Core.Writes.Allow = true
		c.Core.Writes.PartSize = partSize
		c.Core.Writes.PartsInFlight = 3
		if tune != nil {
			tune(c)
		}
	})
}

// writeFile writes data to path through the mount in chunks of chunk
// bytes, and returns the close's error.
func writeFile(t *testing.T, path string, data []byte, chunk int) error {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	for off := 0; off < len(data); off += chunk {
		if _, err := f.Write(data[off:min(off+chunk, len(data))]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// s3SHA256 reads the object straight from S3, not through the mount.
func s3SHA256(t *testing.T, srv *testenv.Server, bucket, key string) string {
	t.Helper()
	o, err := srv.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	h := sha256.New()
	if _, err := io.Copy(h, o); err != nil {
		t.Fatalf("S3 GET %s: %v", key, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func s3Exists(t *testing.T, srv *testenv.Server, bucket, key string) bool {
	t.Helper()
	_, err := srv.Client.StatObject(context.Background(), bucket, key, minio.StatObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).StatusCode != http.StatusNotFound {
		t.Fatalf("S3 HEAD %s: %v", key, err)
	}
	return err == nil
}

// openUploads lists the multipart uploads in progress in bucket, from S3.
func openUploads(t *testing.T, srv *testenv.Server, bucket string) []string {
	t.Helper()
	var keys []string
	for u := range srv.Client.ListIncompleteUploads(context.Background(), bucket, "", true) {
		if u.Err != nil {
			t.Fatalf("list multipart uploads: %v", u.Err)
		}
		keys = append(keys, u.Key+" "+u.UploadID)
	}
	return keys
}

// Both ways of checking a part's body (signed, or its CRC32C in a
// trailer: --write-checksum) land the file byte for byte.
func TestWriteLargeFileInParallelParts(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	for _, crc := range []bool{false, true} {
		t.Run(fmt.Sprintf("crc32c=%v", crc), func(t *testing.T) {
			name := fmt.Sprintf("big-%v.bin", crc)
			mp, d := writable(t, srv, "data", 8<<20, func(c *daemon.Config) { c.S3.PartCRC32C = crc })
			const size = 100 << 20
			data := make([]byte, size)
			if _, err := testenv.RandomData(size, 7).ReadAt(data, 0); err != nil {
				t.Fatal(err)
			}
			if err := writeFile(t, filepath.Join(mp, name), data, 1<<20); err != nil {
				t.Fatalf("close: %v", err)
			}
			want := sum(data)
			if got := s3SHA256(t, srv, "data", name); got != want {
				t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
			}
			if got := fileSHA256(t, filepath.Join(mp, name), 1<<20); got != want {
				t.Fatalf("the mount reads sha256 %s, wrote %s", got, want)
			}
			st, err := os.Stat(filepath.Join(mp, name))
			if err != nil || st.Size() != size {
				t.Fatalf("stat after close: %v, %v; want %d bytes", st, err, size)
			}
			// 100 MiB in 8 MiB parts: 12 full parts and one of 4 MiB.
			if n := metricAt(t, d, "s3_requests_total", "upload_part,ok"); n != 13 {
				t.Errorf("%v parts uploaded, want 13", n)
			}
			if n := metricAt(t, d, "s3_requests_total", "put,ok"); n != 0 {
				t.Errorf("%v single PUTs for a multipart file", n)
			}
			if n := metricSum(t, d, "write_bytes_total"); n != size {
				t.Errorf("write_bytes_total %v, want %d", n, size)
			}
			if n := metricAt(t, d, "uploads_total", "completed"); n != 1 {
				t.Errorf("uploads completed %v, want 1", n)
			}
			if n := metricSum(t, d, "uploads_in_flight"); n != 0 {
				t.Errorf("uploads in flight after close: %v", n)
			}
			if left := openUploads(t, srv, "data"); len(left) != 0 {
				t.Errorf("multipart uploads left open: %v", left)
			}
			names := readDirNames(t, mp)
			if !slices.Contains(names, name) {
				t.Errorf("listing after close %v lacks big.bin", names)
			}
		})
	}
}

func readDirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteSmallAndEmptyFilesAreOnePut(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, d := writable(t, srv, "data", 8<<20, nil)
	small := testenv.RandomBytes(3, 0, 300<<10)
	if err := writeFile(t, filepath.Join(mp, "small"), small, 4096); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := writeFile(t, filepath.Join(mp, "empty"), nil, 1); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := s3SHA256(t, srv, "data", "small"); got != sum(small) {
		t.Fatalf("S3 holds %s, wrote %s", got, sum(small))
	}
	if got := fileSHA256(t, filepath.Join(mp, "small"), 1<<20); got != sum(small) {
		t.Fatalf("the mount reads %s, wrote %s", got, sum(small))
	}
	if got, err := os.ReadFile(filepath.Join(mp, "empty")); err != nil || len(got) != 0 {
		t.Fatalf("empty file reads %d bytes, %v", len(got), err)
	}
	if !s3Exists(t, srv, "data", "empty") {
		t.Fatal("the empty file is not in S3")
	}
	if n := metricAt(t, d, "s3_requests_total", "put,ok"); n != 2 {
		t.Errorf("%v PUTs, want 2", n)
	}
	if n := metricAt(t, d, "s3_requests_total", "create_multipart,ok"); n != 0 {
		t.Errorf("%v multipart uploads for files within one part", n)
	}
}

// A second open for writing by the process writing the file, before it
// wrote a byte, writes the same upload: kvikio opens a file it writes
// twice, the second time O_DIRECT for cuFile. Another process's open, or
// one after bytes were written, stays refused.
func TestWriteSecondOpenBeforeAnyByteJoinsTheUpload(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, _ := writable(t, srv, "data", 5<<20, nil)
	path := filepath.Join(mp, "joined.bin")
	data := testenv.RandomBytes(41, 0, 6<<20+17) // two parts
	half := int64(len(data) / 2)

	const flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	first, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Another process is a second writer, as ever.
	if out, err := exec.Command("sh", "-c", `exec 3>"$1"`, "sh", path).CombinedOutput(); err == nil {
		t.Errorf("another process opened the file being written for writing:\n%s", out)
	}
	second, err := os.OpenFile(path, flags|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Fatalf("second open by the writer before any byte: %v", err)
	}
	if _, err := second.WriteAt(data[:half], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := first.WriteAt(data[half:], half); err != nil {
		t.Fatalf("the first descriptor writes on where the second ended: %v", err)
	}
	// With bytes written, a third open is refused (EPERM: the name is an
	// existing file, and this mount replaces none).
	if _, err := os.OpenFile(path, flags, 0o644); !errors.Is(err, syscall.EPERM) {
		t.Errorf("open for writing after bytes were written: %v, want EPERM", err)
	}
	// As kvikio closes: the first descriptor, whose close ends the upload,
	// then the O_DIRECT one.
	if err := first.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatalf("close of the joined descriptor: %v", err)
	}
	if got, want := s3SHA256(t, srv, "data", "joined.bin"), sum(data); got != want {
		t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
	}
	if got, err := os.ReadFile(path); err != nil || sum(got) != sum(data) {
		t.Fatalf("read back through the mount: %d bytes, %v", len(got), err)
	}
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Errorf("multipart uploads left open: %v", left)
	}
}

// Every refused operation answers its documented errno (docs/operations.md,
// "Writes").
func TestWriteRefusalsAnswerTheirErrno(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "old", []byte("old bytes"))
	srv.PutObject(t, "data", "dir/x", []byte("x"))
	mp, _ := writable(t, srv, "data", 8<<20, nil)
	p := func(name string) string { return filepath.Join(mp, name) }

	f, err := os.Create(p("ooo"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("z"), 10); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("write past the end: %v, want EINVAL", err)
	}
	if _, err := f.WriteAt([]byte("z"), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("write over written bytes: %v, want EINVAL", err)
	}
	if _, err := os.ReadFile(p("ooo")); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("read while written: %v, want EBUSY", err)
	}
	if _, err := os.OpenFile(p("ooo"), os.O_WRONLY|os.O_TRUNC, 0); !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EPERM) {
		t.Errorf("second writer: %v, want EBUSY or EPERM", err)
	}
	if err := f.Truncate(1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("truncate of a file being written: %v, want EINVAL", err)
	}
	// A rename while the file is written (as safetensors does before it
	// closes): the upload ends under the new name.
	if err := os.Rename(p("ooo"), p("ooo2")); err != nil {
		t.Fatalf("rename while written: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if _, err := f.Write([]byte("d")); !errors.Is(err, syscall.EBADF) {
		t.Errorf("write after fsync: %v, want EBADF", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after fsync: %v", err)
	}
	if got, err := os.ReadFile(p("ooo2")); err != nil || string(got) != "abc" {
		t.Fatalf("after fsync and close: %q, %v; want abc", got, err)
	}
	if s3Exists(t, srv, "data", "ooo") || s3SHA256(t, srv, "data", "ooo2") != sum([]byte("abc")) {
		t.Fatal("S3 does not hold the renamed file under its new name only")
	}

	if _, err := os.OpenFile(p("old"), os.O_WRONLY, 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("open of an object for writing without O_TRUNC: %v, want EPERM", err)
	}
	if _, err := os.OpenFile(p("old"), os.O_WRONLY|os.O_APPEND, 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("open for append: %v, want EPERM", err)
	}
	if _, err := os.OpenFile(p("old"), os.O_WRONLY|os.O_TRUNC, 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("overwrite without --allow-overwrite: %v, want EPERM", err)
	}
	if err := os.Truncate(p("old"), 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("truncate(2) of an object: %v, want EPERM", err)
	}
	if _, err := os.OpenFile(p("old"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("O_EXCL create of an existing name: %v, want EEXIST", err)
	}
	if err := os.Rename(p("ooo2"), p("old")); !errors.Is(err, syscall.EPERM) {
		t.Errorf("rename onto an object without --allow-overwrite: %v, want EPERM", err)
	}
	if err := syscall.Rename(p("ooo2"), p("dir")); !errors.Is(err, syscall.EISDIR) { // os.Rename answers EEXIST itself
		t.Errorf("rename onto a directory: %v, want EISDIR", err)
	}
	if err := os.Rename(p("dir"), p("dir2")); !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename of a directory: %v, want EXDEV", err)
	}
	if got, err := os.ReadFile(p("old")); err != nil || string(got) != "old bytes" {
		t.Fatalf("the refused object reads %q, %v", got, err)
	}
	if err := os.Remove(p("dir")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a prefix with objects: %v, want ENOTEMPTY", err)
	}
}

func TestWriteOverwriteNeedsItsFlag(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "old", []byte("old bytes"))
	mp, _ := writable(t, srv, "data", 8<<20, func(c *daemon.Config) { c.Core.Writes.AllowOverwrite = true })
	if got, err := os.ReadFile(filepath.Join(mp, "old")); err != nil || string(got) != "old bytes" {
		t.Fatalf("before: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(mp, "old"), []byte("new bytes!"), 0o644); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
	if got := s3SHA256(t, srv, "data", "old"); got != sum([]byte("new bytes!")) {
		t.Fatal("S3 does not hold the new bytes")
	}
	if got, err := os.ReadFile(filepath.Join(mp, "old")); err != nil || string(got) != "new bytes!" {
		t.Fatalf("after: %q, %v", got, err)
	}
	if _, err := os.OpenFile(filepath.Join(mp, "old"), os.O_WRONLY, 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("open without O_TRUNC: %v, want EPERM even with --allow-overwrite", err)
	}
}

// A read-only mount (the default) keeps answering EROFS to every write.
func TestWriteSideIsReadOnlyWithoutTheFlag(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "f", []byte("x"))
	mp, _ := mountOf(t, srv, "data", nil)
	if err := os.Remove(filepath.Join(mp, "f")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("unlink: %v, want EROFS", err)
	}
	if err := os.Rename(filepath.Join(mp, "f"), filepath.Join(mp, "g")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("rename: %v, want EROFS", err)
	}
	if err := os.Truncate(filepath.Join(mp, "f"), 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("truncate: %v, want EROFS", err)
	}
	if !s3Exists(t, srv, "data", "f") {
		t.Fatal("the object is gone")
	}
}

// The way distributed checkpoints save their metadata: write a temporary
// name, then rename it.
func TestWriteRenameOfJustWrittenFile(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, _ := writable(t, srv, "data", 8<<20, nil)
	body := testenv.RandomBytes(5, 0, 20<<20) // multipart: 3 parts
	if err := os.Mkdir(filepath.Join(mp, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, final := filepath.Join(mp, "ckpt", ".metadata.tmp"), filepath.Join(mp, "ckpt", ".metadata")
	if err := writeFile(t, tmp, body, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if got := fileSHA256(t, final, 1<<20); got != sum(body) {
		t.Fatalf("renamed file reads %s, wrote %s", got, sum(body))
	}
	if got := s3SHA256(t, srv, "data", "ckpt/.metadata"); got != sum(body) {
		t.Fatalf("S3 holds %s under the new name, wrote %s", got, sum(body))
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old name after rename: %v, want ENOENT", err)
	}
	if s3Exists(t, srv, "data", "ckpt/.metadata.tmp") {
		t.Error("S3 still holds the old name")
	}
	if names := readDirNames(t, filepath.Join(mp, "ckpt")); !slices.Equal(names, []string{".metadata"}) {
		t.Errorf("listing after rename: %v", names)
	}
}

// smallCopies makes a rename copy an object past 8 MiB in parts of 5 MiB,
// as it copies one past what one CopyObject takes with the defaults.
func smallCopies(c *daemon.Config) {
	c.Core.Writes.CopyLimit = 8 << 20
	c.Core.Writes.CopyPartSize = 5 << 20
}

// copyParts is how many parts of 5 MiB a copy of the 23 MiB objects of
// these tests takes.
const copyObjectSize, copyParts = 23<<20 + 12345, 5

// isCopyPart matches the UploadPartCopy of part number.
func isCopyPart(number string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "" && r.URL.Query().Get("partNumber") == number
	}
}

// A rename of an object larger than one CopyObject takes is a copy in
// parts on the server: the new name holds the bytes, the old one nothing,
// and no multipart upload stays open.
func TestWriteRenameLargeObjectCopiesInParts(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	want := srv.PutRandomObject(t, "data", "big.bin", copyObjectSize, 21)
	mp, d := writable(t, srv, "data", 8<<20, smallCopies)
	if err := os.Rename(filepath.Join(mp, "big.bin"), filepath.Join(mp, "moved.bin")); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if got := s3SHA256(t, srv, "data", "moved.bin"); got != want {
		t.Fatalf("S3 holds %s under the new name, want %s", got, want)
	}
	if got := fileSHA256(t, filepath.Join(mp, "moved.bin"), 1<<20); got != want {
		t.Fatalf("the mount reads %s under the new name, want %s", got, want)
	}
	if s3Exists(t, srv, "data", "big.bin") {
		t.Error("S3 still holds the old name")
	}
	if _, err := os.Stat(filepath.Join(mp, "big.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old name after rename: %v, want ENOENT", err)
	}
	if n := metricAt(t, d, "s3_requests_total", "upload_part_copy,ok"); n != copyParts {
		t.Errorf("%v parts copied, want %d", n, copyParts)
	}
	if n := metricAt(t, d, "s3_requests_total", "copy,ok"); n != 0 {
		t.Errorf("%v CopyObjects, want none", n)
	}
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Fatalf("multipart uploads left open: %v", left)
	}
}

// safetensors' save_file: a temporary name, sized first with ftruncate,
// written in order, renamed while still open, then closed. The close
// uploads the file, then copies it in parts to its new name.
func TestWriteRenameWhileOpenLargeLikeSafetensors(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, d := writable(t, srv, "data", 8<<20, smallCopies)
	body := testenv.RandomBytes(22, 0, copyObjectSize)
	tmp, final := filepath.Join(mp, ".tmpa1b2c3"), filepath.Join(mp, "model.safetensors")
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(body))); err != nil {
		t.Fatalf("ftruncate: %v", err)
	}
	for off := 0; off < len(body); off += 1 << 20 {
		if _, err := f.Write(body[off:min(off+1<<20, len(body))]); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		t.Fatalf("rename while open: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := s3SHA256(t, srv, "data", "model.safetensors"); got != sum(body) {
		t.Fatalf("S3 holds %s under the new name, wrote %s", got, sum(body))
	}
	if got := fileSHA256(t, final, 1<<20); got != sum(body) {
		t.Fatalf("the mount reads %s under the new name, wrote %s", got, sum(body))
	}
	if s3Exists(t, srv, "data", ".tmpa1b2c3") {
		t.Error("S3 holds the temporary name")
	}
	if names := readDirNames(t, mp); !slices.Equal(names, []string{"model.safetensors"}) {
		t.Errorf("listing after close: %v", names)
	}
	if n := metricAt(t, d, "s3_requests_total", "upload_part_copy,ok"); n != copyParts {
		t.Errorf("%v parts copied, want %d", n, copyParts)
	}
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Fatalf("multipart uploads left open: %v", left)
	}
}

// A copy in parts whose third part keeps failing is aborted: no multipart
// upload is left open and the new name holds nothing. A closed object's
// rename answers EIO and leaves it whole under its name; a file renamed
// while written fails its close with EIO, and neither name holds it.
func TestWriteRenameLargeCopyFailureLeavesNothing(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "closed", true: "while_written"}[open], func(t *testing.T) {
			srv := testenv.Start(t)
			srv.CreateBucket(t, "data")
			proxy, err := faultproxy.Start(srv.Endpoint, faultproxy.Config{Rate: 1, Kinds: []faultproxy.Kind{faultproxy.Status500}, Match: isCopyPart("3")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			mp, d := writable(t, srv, "data", 8<<20, func(c *daemon.Config) {
				smallCopies(c)
				c.S3.Endpoint = proxy.URL
			})
			src, dst := filepath.Join(mp, "src.bin"), filepath.Join(mp, "dst.bin")
			if !open {
				want := srv.PutRandomObject(t, "data", "src.bin", copyObjectSize, 23)
				if err := os.Rename(src, dst); !errors.Is(err, syscall.EIO) {
					t.Fatalf("rename: %v, want EIO", err)
				}
				if got := s3SHA256(t, srv, "data", "src.bin"); got != want {
					t.Fatalf("the source holds %s after the failed rename, want %s", got, want)
				}
				if got := fileSHA256(t, src, 1<<20); got != want {
					t.Fatalf("the mount reads %s under the old name, want %s", got, want)
				}
			} else {
				f, err := os.Create(src)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Write(testenv.RandomBytes(24, 0, copyObjectSize)); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(src, dst); err != nil {
					t.Fatalf("rename while open: %v", err)
				}
				if err := f.Close(); !errors.Is(err, syscall.EIO) {
					t.Fatalf("close: %v, want EIO", err)
				}
				if s3Exists(t, srv, "data", "src.bin") {
					t.Error("S3 holds the name the file was uploaded as")
				}
				if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the mount shows the old name: %v", err)
				}
			}
			if proxy.Injected() == 0 {
				t.Fatal("no fault was injected")
			}
			if n := metricSum(t, d, "upload_part_retries_total"); n == 0 {
				t.Error("no copy part was retried")
			}
			if s3Exists(t, srv, "data", "dst.bin") {
				t.Error("the failed copy left the new name")
			}
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the mount shows the new name: %v", err)
			}
			if left := openUploads(t, srv, "data"); len(left) != 0 {
				t.Fatalf("multipart uploads left open: %v", left)
			}
		})
	}
}

func TestWriteMkdirThenWriteUnderItAndUnlink(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, _ := writable(t, srv, "data", 8<<20, nil)
	dir := filepath.Join(mp, "run1", "step1")
	if err := os.Mkdir(filepath.Join(mp, "run1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("mkdir again: %v, want EEXIST", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("stat of the new directory: %v, %v", st, err)
	}
	if names := readDirNames(t, mp); !slices.Contains(names, "run1") {
		t.Errorf("listing lacks the new directory: %v", names)
	}
	if err := os.Mkdir(filepath.Join(mp, "gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mp, "gone")); err != nil {
		t.Errorf("rmdir of an empty new directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mp, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after rmdir: %v", err)
	}
	body := []byte("model weights")
	if err := writeFile(t, filepath.Join(dir, "w.bin"), body, 4); err != nil {
		t.Fatal(err)
	}
	if got := s3SHA256(t, srv, "data", "run1/step1/w.bin"); got != sum(body) {
		t.Fatal("S3 does not hold the file under the directory")
	}
	if names := readDirNames(t, filepath.Join(mp, "run1")); !slices.Equal(names, []string{"step1"}) {
		t.Errorf("run1 lists %v", names)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "w.bin")); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("reads %q, %v", got, err)
	}
	if err := os.Remove(filepath.Join(dir, "w.bin")); err != nil {
		t.Fatalf("unlink: %v", err)
	}
	if s3Exists(t, srv, "data", "run1/step1/w.bin") {
		t.Error("S3 still holds the unlinked object")
	}
	if _, err := os.Stat(filepath.Join(dir, "w.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat after unlink: %v", err)
	}
}

// A writer faster than the server: every part waits a while before the
// server sees it, so the writer is held back by the parts in flight, and
// the daemon's block memory never holds more than those parts and the one
// being filled, far inside --memory-limit; every byte lands.
func TestWriteFasterThanTheServerStaysWithinItsParts(t *testing.T) {
	isPart := func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Has("partNumber")
	}
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	proxy, err := faultproxy.Start(srv.Endpoint, faultproxy.Config{Rate: 1, Kinds: []faultproxy.Kind{faultproxy.Delay},
		StallFor: 150 * time.Millisecond, Match: isPart})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	const partSize, memoryLimit = 8 << 20, 512 << 20
	mp, d := writable(t, srv, "data", partSize, func(c *daemon.Config) {
		c.S3.Endpoint = proxy.URL
		c.Core.MemoryLimit, c.Core.CacheSize = memoryLimit, memoryLimit/2
	})
	inFlight := int64(d.Core.Config().Writes.PartsInFlight)

	var peak atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v, err := d.Metrics.Value("block_memory_bytes", ""); err == nil && int64(v) > peak.Load() {
				peak.Store(int64(v))
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	data := testenv.RandomBytes(12, 0, 96<<20)
	werr := writeFile(t, filepath.Join(mp, "fast.bin"), data, 4<<20)
	close(stop)
	<-sampled
	if werr != nil {
		t.Fatalf("close: %v", werr)
	}
	if got := s3SHA256(t, srv, "data", "fast.bin"); got != sum(data) {
		t.Fatal("S3 does not hold the bytes written")
	}
	if n := proxy.Counts()["delay"]; n < int64(len(data)/partSize) {
		t.Fatalf("%d parts delayed, want every one of %d", n, len(data)/partSize)
	}
	// The parts being sent, one filled and waiting for a turn, one being filled.
	bound := (inFlight + 2) * partSize
	t.Logf("block memory peaked at %d MiB writing %d MiB in %d MiB parts", peak.Load()>>20, len(data)>>20, partSize>>20)
	if p := peak.Load(); p == 0 || p > bound {
		t.Errorf("block memory peaked at %d bytes while writing: want some, and at most %d (%d parts in flight, one waiting, one filling) of the %d allowed",
			p, bound, inFlight, memoryLimit)
	}
}

// A write through a store that fails mid-upload: close answers EIO, no
// object appears and no multipart upload is left open.
func TestWriteFaultsLeaveNothing(t *testing.T) {
	isPart := func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Has("partNumber")
	}
	for _, tc := range []struct {
		name string
		kind faultproxy.Kind
	}{
		{"part_500", faultproxy.Status500},
		{"part_cut", faultproxy.CutRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.Start(t)
			srv.CreateBucket(t, "data")
			proxy, err := faultproxy.Start(srv.Endpoint, faultproxy.Config{Seed: 1, Rate: 0, Kinds: []faultproxy.Kind{tc.kind}, Match: isPart})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			mp, d := writable(t, srv, "data", 8<<20, func(c *daemon.Config) { c.S3.Endpoint = proxy.URL })
			data := testenv.RandomBytes(9, 0, 40<<20)
			f, err := os.Create(filepath.Join(mp, "ckpt.bin"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(data[:12<<20]); err != nil {
				t.Fatal(err)
			}
			proxy.SetRate(1) // every part from now on, and its retries
			_, werr := f.Write(data[12<<20:])
			cerr := f.Close()
			if !errors.Is(cerr, syscall.EIO) {
				t.Fatalf("close: %v (write: %v), want EIO", cerr, werr)
			}
			if werr != nil && !errors.Is(werr, syscall.EIO) {
				t.Errorf("write: %v, want success or EIO", werr)
			}
			if proxy.Injected() == 0 {
				t.Fatal("no fault was injected")
			}
			if s3Exists(t, srv, "data", "ckpt.bin") {
				t.Fatal("a failed upload left an object")
			}
			if left := openUploads(t, srv, "data"); len(left) != 0 {
				t.Fatalf("multipart uploads left open: %v", left)
			}
			if _, err := os.Stat(filepath.Join(mp, "ckpt.bin")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the mount shows the failed file: %v", err)
			}
			if n := metricAt(t, d, "uploads_total", "aborted"); n != 1 {
				t.Errorf("uploads aborted %v, want 1", n)
			}
			if n := metricSum(t, d, "upload_part_retries_total"); n == 0 {
				t.Error("no part was retried")
			}
		})
	}
}

// The server gone mid-upload: close answers EIO and nothing is visible;
// the upload the daemon could not abort is in its journal, and the next
// start aborts it.
func TestWriteServerGoneThenNextStartAbortsTheUpload(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	proxy, err := faultproxy.Start(srv.Endpoint, faultproxy.Config{Rate: 0})
	if err != nil {
		t.Fatal(err)
	}
	journal := t.TempDir()
	mp, d := writable(t, srv, "data", 8<<20, func(c *daemon.Config) {
		c.S3.Endpoint = proxy.URL
		c.Core.Writes.Journal = journal
	})
	data := testenv.RandomBytes(11, 0, 40<<20)
	f, err := os.Create(filepath.Join(mp, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data[:20<<20]); err != nil {
		t.Fatal(err)
	}
	// Parts are on the server: the upload exists there.
	deadline := time.Now().Add(time.Minute)
	for metricAt(t, d, "s3_requests_total", "upload_part,ok") < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Close()
	_, werr := f.Write(data[20<<20:])
	if cerr := f.Close(); !errors.Is(cerr, syscall.EIO) {
		t.Fatalf("close: %v (write: %v), want EIO", cerr, werr)
	}
	if s3Exists(t, srv, "data", "ckpt.bin") {
		t.Fatal("an object appeared")
	}
	if left := openUploads(t, srv, "data"); len(left) != 1 {
		t.Fatalf("uploads open on the server: %v, want the one the daemon could not abort", left)
	}
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	_, d2 := writable(t, srv, "data", 8<<20, func(c *daemon.Config) { c.Core.Writes.Journal = journal })
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Fatalf("uploads open after the next start: %v", left)
	}
	if n := metricAt(t, d2, "uploads_total", "aborted"); n != 1 {
		t.Errorf("the next start counted %v aborted uploads, want 1", n)
	}
	files, _ := filepath.Glob(filepath.Join(journal, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "ckpt.bin") {
			t.Errorf("journal %s still names the aborted upload", f)
		}
	}
}
