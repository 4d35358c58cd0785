package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http/httptrace"
	"os"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestRandomDataIsDeterministicAndSeekable(t *testing.T) {
	const size = 1<<20 + 13
	whole, err := io.ReadAll(RandomData(size, 7))
	if err != nil || len(whole) != size {
		t.Fatalf("read %d bytes, err %v", len(whole), err)
	}
	again, _ := io.ReadAll(RandomData(size, 7))
	if !bytes.Equal(whole, again) {
		t.Fatal("same seed gave different data")
	}
	other, _ := io.ReadAll(RandomData(size, 8))
	if bytes.Equal(whole[:64], other[:64]) {
		t.Fatal("different seeds gave the same data")
	}
	for _, r := range [][2]int{{0, 1}, {3, 17}, {8, 8}, {1000, 4096}, {size - 5, 5}} {
		if got := RandomBytes(7, int64(r[0]), r[1]); !bytes.Equal(got, whole[r[0]:r[0]+r[1]]) {
			t.Errorf("RandomBytes(off %d, n %d) differs from the stream", r[0], r[1])
		}
	}
	sum := sha256.Sum256(whole)
	if got := RandomSHA256(size, 7); got != hex.EncodeToString(sum[:]) {
		t.Errorf("RandomSHA256 = %s, want %x", got, sum)
	}
}

func TestServerRoundTrip(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "roundtrip")

	small := []byte("hello, versitygw\n")
	s.PutObject(t, "roundtrip", "dir/small.txt", small)
	if got := getAll(t, s, "roundtrip", "dir/small.txt"); !bytes.Equal(got, small) {
		t.Fatalf("small object came back as %q", got)
	}

	// Large enough for a multipart upload.
	const size = 40<<20 + 123
	want := s.PutRandomObject(t, "roundtrip", "big.bin", size, 42)
	if want != RandomSHA256(size, 42) {
		t.Fatal("PutRandomObject returned a checksum that does not match the generator")
	}
	got := getAll(t, s, "roundtrip", "big.bin")
	if len(got) != size {
		t.Fatalf("got %d bytes, want %d", len(got), size)
	}
	if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != want {
		t.Fatal("object content changed on the round trip")
	}

	// Ranged GETs are what a filesystem issues.
	opts := minio.GetObjectOptions{}
	opts.SetRange(5<<20+3, 6<<20)
	obj, err := s.Client.GetObject(context.Background(), "roundtrip", "big.bin", opts)
	if err != nil {
		t.Fatal(err)
	}
	part, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(part, RandomBytes(42, 5<<20+3, 1<<20-2)) {
		t.Fatal("ranged GET returned wrong bytes")
	}
}

func TestCloseStopsServerAndRemovesDir(t *testing.T) {
	s, err := StartServer(Options{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server directory still there: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", s.Host, time.Second); err == nil {
		conn.Close()
		t.Error("server still listens after Close")
	}
}

func getAll(t *testing.T, s *Server, bucket, key string) []byte {
	t.Helper()
	obj, err := s.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	return data
}

// The server keeps a client's connection for its next request, as S3
// services do, unless asked to close every one (versitygw's default).
func TestServerKeepsConnectionsUnlessAskedNotTo(t *testing.T) {
	for _, closeConns := range []bool{false, true} {
		s, err := StartServer(Options{BaseDir: t.TempDir(), CloseConnections: closeConns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.CreateBucket(t, "conns")
		s.PutRandomObject(t, "conns", "a", 4096, 1)
		// A client that keeps connections, as the daemon's does (the
		// server's own Client takes one per request).
		cli, err := minio.New(s.Host, &minio.Options{
			Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: s.Region, BucketLookup: minio.BucketLookupPath,
		})
		if err != nil {
			t.Fatal(err)
		}
		var reused []bool
		for range 3 {
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(ci httptrace.GotConnInfo) { reused = append(reused, ci.Reused) },
			})
			obj, err := cli.GetObject(ctx, "conns", "a", minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, obj); err != nil {
				t.Fatal(err)
			}
			obj.Close()
		}
		if got, want := reused[len(reused)-1], !closeConns; got != want {
			t.Errorf("CloseConnections %v: the last GET's connection reused %v (all: %v)", closeConns, got, reused)
		}
	}
}
