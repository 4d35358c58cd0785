package vfs

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// maxListedEntries bounds the entries that cached listings hold in all
// (each an Entry: its name, key and version, some 200 bytes with a short
// key, so some 50 MiB at most with the default), and --meta-entries bounds
// it too. A listing of more names than that is not cached: its directory is
// listed again at every ls, and its names looked up one by one.
const maxListedEntries = 1 << 18

// listings caches complete listings of directories for --meta-ttl, so that
// a directory listed once answers a repeated listing and the lookups of its
// names (found: the listed entry; not listed: no such name) without a
// request. Like the other caches it may hide a name created after the
// listing, until the TTL runs out. Least recently used listings go first
// when the bound is reached.
type listings struct {
	ttl time.Duration
	max int

	mu    sync.Mutex
	now   func() time.Time
	lru   *simplelru.LRU[string, *listing] // by the directory's Path; nil when off
	total int                              // entries held in all
}

type listing struct {
	entries []Entry // in the order listed
	byName  map[string]int
	expires time.Time
}

func newListings(ttl time.Duration, max int) *listings {
	l := &listings{ttl: ttl, max: max, now: time.Now}
	if ttl > 0 && max > 0 {
		// The count is bounded by entries (evict), not by listings.
		l.lru, _ = simplelru.NewLRU[string, *listing](max, func(_ string, v *listing) { l.total -= len(v.entries) })
	}
	return l
}

// put caches dir's complete listing; one over the bound is not cached.
func (l *listings) put(dir string, entries []Entry) {
	if l.lru == nil || len(entries) > l.max {
		return
	}
	ls := &listing{entries: entries, byName: make(map[string]int, len(entries))}
	for i, e := range entries {
		ls.byName[e.Name] = i
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ls.expires = l.now().Add(l.ttl)
	l.lru.Remove(dir)
	l.lru.Add(dir, ls)
	l.total += len(entries)
	for l.total > l.max {
		l.lru.RemoveOldest()
	}
}

// get returns dir's cached listing, or nil.
func (l *listings) get(dir string) *listing {
	if l.lru == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ls, ok := l.lru.Get(dir)
	if !ok {
		return nil
	}
	if !l.now().Before(ls.expires) {
		l.lru.Remove(dir)
		return nil
	}
	return ls
}

// lookup answers for name in dir from a cached listing: ok is false when
// dir's listing is not held.
func (l *listings) lookup(dir, name string) (e Entry, found, ok bool) {
	ls := l.get(dir)
	if ls == nil {
		return Entry{}, false, false
	}
	i, found := ls.byName[name]
	if !found {
		return Entry{}, false, true
	}
	return ls.entries[i], true, true
}

// drop forgets dir's listing.
func (l *listings) drop(dir string) {
	if l.lru == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lru.Remove(dir)
}
