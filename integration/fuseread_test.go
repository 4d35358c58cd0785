package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// A mount with --fuse-max-read 4MiB gets its direct-I/O reads from the
// kernel in 4 MiB requests, a quarter as many replies as with 1 MiB:
// through blocks and spliced from the socket, every byte right. As root
// the daemon raises fs.fuse.max_pages_limit for it (restored after).
func TestLargeFuseReads(t *testing.T) {
	old, err := os.ReadFile(daemon.FuseMaxPagesLimit)
	if err != nil {
		t.Skipf("this kernel bounds FUSE requests at 1 MiB (%v)", err)
	}
	if os.Geteuid() != 0 {
		if n, _ := strconv.Atoi(strings.TrimSpace(string(old))); n*os.Getpagesize() < testMaxFuseRead {
			t.Skipf("fs.fuse.max_pages_limit is %d pages and only root may raise it", n)
		}
	}
	t.Cleanup(func() { os.WriteFile(daemon.FuseMaxPagesLimit, old, 0o644) })

	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 24<<20 + 12345, 83
	sum := srv.PutRandomObject(t, "data", "big.bin", size, seed)
	for _, splice := range []string{"never", "always"} {
		t.Run("splice="+splice, func(t *testing.T) {
			if splice == "always" {
				requireSplice(t, testMaxFuseRead)
			}
			mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
				c.FS.MaxRead = testMaxFuseRead
				c.Splice = splice
				c.Core.DirectIO = vfs.DirectIOAlways
			})
			path := filepath.Join(mp, "big.bin")
			if got := fileSHA256(t, path, 16<<20); got != sum {
				t.Fatalf("sha256 %s, want %s", got, sum)
			}
			replies := metric(t, d, "fuse_read_replies_total")
			if want := fmt.Sprint(float64((size + testMaxFuseRead - 1) / testMaxFuseRead)); replies != want {
				t.Errorf("%s READ replies for a %d-byte object read with 16 MiB buffers: want %s, one per 4 MiB", replies, size, want)
			}
			spliced := metric(t, d, "splice_bytes_total")
			if (splice == "always") != (spliced == fmt.Sprint(float64(size))) {
				t.Errorf("%s bytes spliced with --splice %s", spliced, splice)
			}
		})
	}
}
