package hoststandin

import (
	"os"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

func mustAcquire(t *testing.T, c *cufile.ImportCache, owner, device int, h cufile.Handle) cufile.Allocation {
	t.Helper()
	a, err := c.Acquire(owner, device, h)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// ok fails the test on err: the cache's Put and ReleaseOwner are what is
// under test, so their errors are never ignored.
func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// With the host stand-in, a released import is really unmapped.
func TestImportCacheWithStandin(t *testing.T) {
	b, dir := standin(t)
	cufiletest.StandinFile(t, dir, "buf", 4096, 0)
	c := cufile.NewImportCache(b)
	a := mustAcquire(t, c, os.Getpid(), 0, cufiletest.NameHandle("buf"))
	if a.Size() != 4096 {
		t.Fatalf("Size = %d", a.Size())
	}
	ok(t, c.Put(a))
	if n, err := c.Reap(cufile.ProcessAlive); err != nil || n != 0 {
		t.Fatal("Reap released this live process")
	}
	if c.OpenImports() != 1 {
		t.Fatal("import not kept for its owner")
	}
	ok(t, c.ReleaseOwner(os.Getpid()))
	if !a.(*hostAllocation).closed {
		t.Fatal("import not closed after its owner left")
	}
}
