package cufile

import (
	"errors"
	"os"
	"sync"
	"testing"
)

// countingBackend counts imports and closes, and lets a test fail imports.
type countingBackend struct {
	mu      sync.Mutex
	imports int
	open    map[*countedAllocation]bool
}

type countedAllocation struct {
	b      *countingBackend
	device int
	h      Handle
}

func (a *countedAllocation) Device() int  { return a.device }
func (a *countedAllocation) Size() uint64 { return 1 << 20 }
func (a *countedAllocation) Close() error {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	if !a.b.open[a] {
		return errors.New("closed twice")
	}
	delete(a.b.open, a)
	return nil
}

func (b *countingBackend) Name() string                   { return "counting" }
func (b *countingBackend) Devices() ([]DeviceInfo, error) { return nil, nil }
func (b *countingBackend) NewStager(int, StagerConfig) (Stager, error) {
	return nil, errors.New("no stager")
}

func (b *countingBackend) Import(device int, h Handle) (Allocation, error) {
	if h[0] == 0xff {
		return nil, ErrBadHandle
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.imports++
	a := &countedAllocation{b: b, device: device, h: h}
	b.open[a] = true
	return a, nil
}

func (b *countingBackend) counts() (imports, open int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.imports, len(b.open)
}

func newCounting() (*countingBackend, *ImportCache) {
	b := &countingBackend{open: map[*countedAllocation]bool{}}
	return b, NewImportCache(b)
}

// ok fails the test on err: the cache's Put and ReleaseOwner are what is
// under test, so their errors are never ignored.
func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustAcquire(t *testing.T, c *ImportCache, owner, device int, h Handle) Allocation {
	t.Helper()
	a, err := c.Acquire(owner, device, h)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func checkCounts(t *testing.T, b *countingBackend, c *ImportCache, imports, open int) {
	t.Helper()
	gotImports, gotOpen := b.counts()
	if gotImports != imports || gotOpen != open || c.OpenImports() != open {
		t.Fatalf("imports %d, open %d (cache says %d); want %d, %d", gotImports, gotOpen, c.OpenImports(), imports, open)
	}
}

func TestImportCacheSharesOneImport(t *testing.T) {
	b, c := newCounting()
	h := Handle{1}
	a1 := mustAcquire(t, c, 100, 0, h)
	a2 := mustAcquire(t, c, 100, 0, h)
	a3 := mustAcquire(t, c, 200, 0, h)
	if a1 != a2 || a1 != a3 {
		t.Fatal("one handle gave several allocations")
	}
	checkCounts(t, b, c, 1, 1)

	// Same bytes on another device, or other bytes, are other imports.
	a4, a5 := mustAcquire(t, c, 100, 1, h), mustAcquire(t, c, 100, 0, Handle{2})
	if a4 == a1 || a5 == a1 || a4 == a5 {
		t.Fatal("different keys shared an import")
	}
	checkCounts(t, b, c, 3, 3)
	for _, a := range []Allocation{a1, a2, a3, a4, a5} {
		if err := c.Put(a); err != nil {
			t.Fatal(err)
		}
	}
	checkCounts(t, b, c, 3, 3) // owners still hold them

	if err := c.ReleaseOwner(100); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, b, c, 3, 1) // owner 200 holds handle 1 still
	if err := c.ReleaseOwner(200); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, b, c, 3, 0)
	if err := c.ReleaseOwner(200); err != nil {
		t.Fatalf("releasing an unknown owner: %v", err)
	}
}

func TestImportCacheKeepsImportsInUse(t *testing.T) {
	b, c := newCounting()
	a := mustAcquire(t, c, 100, 0, Handle{1})
	if err := c.ReleaseOwner(100); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, b, c, 1, 1) // the request still copies into it

	// Another process acquires it meanwhile: no second import.
	if mustAcquire(t, c, 300, 0, Handle{1}) != a {
		t.Fatal("in-use import reopened")
	}
	ok(t, c.Put(a))
	checkCounts(t, b, c, 1, 1)
	ok(t, c.Put(a))
	checkCounts(t, b, c, 1, 1) // owner 300 holds it
	ok(t, c.ReleaseOwner(300))
	checkCounts(t, b, c, 1, 0)
	if err := c.Put(a); err == nil {
		t.Fatal("Put after the import closed succeeded")
	}
}

func TestImportCacheReap(t *testing.T) {
	b, c := newCounting()
	for _, owner := range []int{10, 11, 12} {
		ok(t, c.Put(mustAcquire(t, c, owner, 0, Handle{byte(owner)})))
	}
	ok(t, c.Put(mustAcquire(t, c, 12, 0, Handle{10}))) // 12 shares 10's
	checkCounts(t, b, c, 3, 3)

	n, err := c.Reap(func(pid int) bool { return pid == 12 })
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2 owners", n, err)
	}
	checkCounts(t, b, c, 3, 2) // handles 10 and 12 held by 12
	if n, err := c.Reap(func(int) bool { return true }); err != nil || n != 0 {
		t.Fatalf("Reap released %d live owners (%v)", n, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, b, c, 3, 0)
}

func TestImportCacheFailedImportLeavesNoTrace(t *testing.T) {
	b, c := newCounting()
	if _, err := c.Acquire(1, 0, Handle{0xff}); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Acquire = %v", err)
	}
	checkCounts(t, b, c, 0, 0)
	if n, err := c.Reap(func(int) bool { return false }); err != nil || n != 0 {
		t.Fatalf("a failed Acquire left an owner behind (%d reaped, %v)", n, err)
	}
}

func TestImportCacheConcurrentAcquire(t *testing.T) {
	b, c := newCounting()
	var wg sync.WaitGroup
	for owner := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				a, err := c.Acquire(owner, 0, Handle{byte(owner % 4)})
				if err != nil {
					t.Error(err)
					return
				}
				if err := c.Put(a); err != nil {
					t.Error(err)
					return
				}
			}
			if err := c.ReleaseOwner(owner); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	imports, open := b.counts()
	if open != 0 || imports < 4 {
		t.Fatalf("after every owner left: %d imports, %d open", imports, open)
	}
}

func TestProcessAlive(t *testing.T) {
	if !ProcessAlive(os.Getpid()) || !ProcessAlive(1) {
		t.Error("live process reported gone")
	}
	if ProcessAlive(0) || ProcessAlive(-5) || ProcessAlive(1<<30) {
		t.Error("impossible pid reported alive")
	}
}
