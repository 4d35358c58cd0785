package cufile

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// ImportCache shares imported allocations between requests and callers, so
// a process that reuses one buffer pays for the import once.
//
// Two kinds of reference keep an import open:
//   - an owner (the caller's pid) holds every import it has used until
//     ReleaseOwner (its files are closed) or Reap (it has exited), since the
//     exporter may free the memory only after the importer has closed it;
//   - a request holds the import it copies into from Acquire until its
//     matching Put, so releasing an owner never unmaps memory that copies
//     are still landing in.
//
// The import is closed when it has neither. Methods are safe for concurrent
// use.
type ImportCache struct {
	backend Backend

	mu      sync.Mutex
	entries map[importKey]*importEntry
	byAlloc map[Allocation]*importEntry
	owners  map[int]map[importKey]bool

	beforeClose func(Allocation)
}

type importKey struct {
	device int
	handle Handle
	uid    uint32 // the caller's, for a CallerImporter; else 0
}

type importEntry struct {
	key    importKey
	alloc  Allocation
	owners int // owners holding it
	inUse  int // requests between Acquire and Put
}

func NewImportCache(b Backend) *ImportCache {
	return &ImportCache{
		backend: b,
		entries: map[importKey]*importEntry{},
		byAlloc: map[Allocation]*importEntry{},
		owners:  map[int]map[importKey]bool{},
	}
}

// Acquire returns the import of h on device for one request of owner,
// opening it on first use. Every successful Acquire needs one Put.
func (c *ImportCache) Acquire(owner, device int, h Handle) (Allocation, error) {
	return c.AcquireAs(owner, uint32(os.Geteuid()), device, h)
}

// AcquireAs is Acquire for a request of the user uid. A CallerImporter
// backend checks uid on each import, and an import one uid opened is never
// handed to another.
func (c *ImportCache) AcquireAs(owner int, uid uint32, device int, h Handle) (Allocation, error) {
	key := importKey{device: device, handle: h}
	ci, perCaller := c.backend.(CallerImporter)
	if perCaller {
		key.uid = uid
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		// Opened under the lock so that one handle is never opened twice.
		var a Allocation
		var err error
		if perCaller {
			a, err = ci.ImportAs(device, h, uid)
		} else {
			a, err = c.backend.Import(device, h)
		}
		if err != nil {
			return nil, err
		}
		e = &importEntry{key: key, alloc: a}
		c.entries[key] = e
		c.byAlloc[a] = e
	}
	held := c.owners[owner]
	if held == nil {
		held = map[importKey]bool{}
		c.owners[owner] = held
	}
	if !held[key] {
		held[key] = true
		e.owners++
	}
	e.inUse++
	return e.alloc, nil
}

// Put ends the request that acquired a; it closes the import if no owner
// holds it any more.
func (c *ImportCache) Put(a Allocation) error {
	c.mu.Lock()
	e := c.byAlloc[a]
	if e == nil || e.inUse == 0 {
		c.mu.Unlock()
		return errors.New("cufile: Put of an allocation not acquired from this cache")
	}
	e.inUse--
	closing := c.dropIfUnusedLocked(e)
	c.mu.Unlock()
	return c.closeAll(closing)
}

// ReleaseOwner drops every reference owner holds; imports no one else holds
// and no request uses are closed.
func (c *ImportCache) ReleaseOwner(owner int) error {
	c.mu.Lock()
	closing := c.releaseOwnerLocked(owner)
	c.mu.Unlock()
	return c.closeAll(closing)
}

func (c *ImportCache) releaseOwnerLocked(owner int) []Allocation {
	var closing []Allocation
	for key := range c.owners[owner] {
		e := c.entries[key]
		e.owners--
		closing = append(closing, c.dropIfUnusedLocked(e)...)
	}
	delete(c.owners, owner)
	return closing
}

func (c *ImportCache) dropIfUnusedLocked(e *importEntry) []Allocation {
	if e.owners > 0 || e.inUse > 0 {
		return nil
	}
	delete(c.entries, e.key)
	delete(c.byAlloc, e.alloc)
	return []Allocation{e.alloc}
}

// OnClose registers a function run before each import is closed, so what
// was built on the mapping (RDMA registrations) goes first.
func (c *ImportCache) OnClose(f func(Allocation)) {
	c.mu.Lock()
	c.beforeClose = f
	c.mu.Unlock()
}

// closeAll runs outside the lock: closing costs a driver call each.
func (c *ImportCache) closeAll(allocs []Allocation) error {
	c.mu.Lock()
	hook := c.beforeClose
	c.mu.Unlock()
	var errs []error
	for _, a := range allocs {
		if hook != nil {
			hook(a)
		}
		if err := a.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cufile: closing import: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Reap releases every owner for which alive reports false (see
// ProcessAlive) and returns how many it released.
func (c *ImportCache) Reap(alive func(pid int) bool) (int, error) {
	c.mu.Lock()
	var gone []int
	for owner := range c.owners {
		if !alive(owner) {
			gone = append(gone, owner)
		}
	}
	var closing []Allocation
	for _, owner := range gone {
		closing = append(closing, c.releaseOwnerLocked(owner)...)
	}
	c.mu.Unlock()
	return len(gone), c.closeAll(closing)
}

// OpenImports is the number of imports now open.
func (c *ImportCache) OpenImports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Close releases every owner; imports still used by requests close at
// their last Put.
func (c *ImportCache) Close() error {
	c.mu.Lock()
	var closing []Allocation
	for owner := range c.owners {
		closing = append(closing, c.releaseOwnerLocked(owner)...)
	}
	c.mu.Unlock()
	return c.closeAll(closing)
}

// ProcessAlive reports whether a process with this pid exists (a pid can be
// reused, so a long-gone owner may look alive until the new process exits).
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}
