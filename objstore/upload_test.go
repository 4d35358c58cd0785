package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// Parts copied from ranges of an object make it whole, byte for byte; a
// part asked of a version the source no longer is fails with ErrChanged.
func TestUploadPartCopyRangesAndPinsTheVersion(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 12<<20 + 5, 31
	want := srv.PutRandomObject(t, "data", "src", size, seed)
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ctx := context.Background()
	obj, err := m.Stat(ctx, "data", "src")
	if err != nil {
		t.Fatal(err)
	}
	id, err := m.CreateMultipart(ctx, "data", "dst")
	if err != nil {
		t.Fatal(err)
	}
	var parts []CompletedPart
	for i, off := range []int64{0, MinPartSize, 2 * MinPartSize} {
		p, err := m.UploadPartCopy(ctx, "data", "src", obj.ETag, "dst", id, i+1, off, min(MinPartSize, size-off))
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		parts = append(parts, p)
	}
	if _, err := m.UploadPartCopy(ctx, "data", "src", "0123456789abcdef0123456789abcdef", "dst", id, 4, 0, MinPartSize); !errors.Is(err, ErrChanged) {
		t.Fatalf("a part of another version: %v, want ErrChanged", err)
	}
	if _, err := m.CompleteMultipart(ctx, "data", "dst", id, parts); err != nil {
		t.Fatal(err)
	}
	if got := storedSHA256(t, srv, "data", "dst"); got != want {
		t.Fatalf("the copy is %s, the source %s", got, want)
	}
}

// storedSHA256 is the sha256 of the object as the server holds it.
func storedSHA256(t *testing.T, srv *testenv.Server, bucket, key string) string {
	t.Helper()
	o, err := srv.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	h := sha256.New()
	if _, err := io.Copy(h, o); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Parts sent with their CRC32C in a trailer (Config.PartCRC32C) land byte
// for byte, and the server checks the sum: a part whose body is not what
// its trailer says is refused, not stored.
func TestPartsWithCRC32CAreCheckedByTheServer(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	m.partCRC32C = true
	ctx := context.Background()
	body := testenv.RandomBytes(47, 0, 2*MinPartSize+7)
	id, err := m.CreateMultipart(ctx, "data", "crc")
	if err != nil {
		t.Fatal(err)
	}
	bad := crc32.Checksum(body[:MinPartSize], castagnoli) ^ 1
	if _, err := m.uploadPart(ctx, "data", "crc", id, 1, [][]byte{body[:MinPartSize]}, binary.BigEndian.AppendUint32(nil, bad)); err == nil {
		t.Fatal("a part whose CRC32C does not match its body was taken")
	}
	var parts []CompletedPart
	for i, off := range []int{0, MinPartSize, 2 * MinPartSize} {
		end := min(off+MinPartSize, len(body))
		// Two slices, as a part of blocks is sent: the sum is of them all.
		p, err := m.UploadPart(ctx, "data", "crc", id, i+1, [][]byte{body[off : off+(end-off)/2], body[off+(end-off)/2 : end]})
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		parts = append(parts, p)
	}
	if _, err := m.CompleteMultipart(ctx, "data", "crc", id, parts); err != nil {
		t.Fatal(err)
	}
	sent := sha256.Sum256(body)
	if got := storedSHA256(t, srv, "data", "crc"); got != hex.EncodeToString(sent[:]) {
		t.Fatalf("the object is %s, what was sent %x", got, sent)
	}
}
