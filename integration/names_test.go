package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// An object replaced under an open reader fails the read with ESTALE, and
// the very next open reads the new version, well within --meta-ttl: the
// ESTALE drops the kernel's entry for the name as well as the daemon's.
func TestOpenAfterESTALESeesTheNewVersionAtOnce(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 8 << 20
	srv.PutRandomObject(t, "data", "sub/x.bin", size, 1)
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Core.CacheSize = 2 << 20
		c.Core.MaxWindow = 1 << 20
		c.Core.NoStream = true // ranged GETs, pinned with If-Match
		// The default TTLs: a minute for the kernel's entry and attributes.
	})
	path := filepath.Join(mp, "sub", "x.bin")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	newSum := srv.PutRandomObject(t, "data", "sub/x.bin", size, 2)
	if _, err := f.ReadAt(make([]byte, 1<<20), 6<<20); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read after replacement: %v, want ESTALE", err)
	}
	start := time.Now()
	if got := fileSHA256(t, path, 1<<20); got != newSum {
		t.Fatalf("open after ESTALE read sha256 %s, want the new version's %s", got, newSum)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("new open took %s", took)
	}
}

// countingStore counts LIST and HEAD requests.
type countingStore struct {
	objstore.Store
	mu          sync.Mutex
	lists, stat int
}

func (c *countingStore) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (objstore.Page, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Store.List(ctx, bucket, prefix, cont, maxKeys)
}

func (c *countingStore) Stat(ctx context.Context, bucket, key string) (objstore.Object, error) {
	c.mu.Lock()
	c.stat++
	c.mu.Unlock()
	return c.Store.Stat(ctx, bucket, key)
}

// take returns the counts since the last take.
func (c *countingStore) take() (lists, heads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lists, heads = c.lists, c.stat
	c.lists, c.stat = 0, 0
	return lists, heads
}

