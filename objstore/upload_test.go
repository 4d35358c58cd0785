package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	o, err := srv.Client.GetObject(ctx, "data", "dst", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	h := sha256.New()
	if _, err := io.Copy(h, o); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("the copy is %s, the source %s", got, want)
	}
}
