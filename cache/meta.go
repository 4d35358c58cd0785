package cache

import (
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// MetaCache caches lookups by path with a positive TTL for entries found and
// a negative TTL for names that do not exist, bounded in entries (LRU). A TTL
// of 0 disables that kind of caching; maxEntries <= 0 disables caching
// altogether. It is safe for concurrent use.
type MetaCache[V any] struct {
	positiveTTL time.Duration
	negativeTTL time.Duration

	mu           sync.Mutex
	now          func() time.Time
	entries      *simplelru.LRU[string, metaEntry[V]] // nil when caching is off
	hits         uint64
	negativeHits uint64
	misses       uint64
}

type metaEntry[V any] struct {
	value   V
	exists  bool
	expires time.Time
}

// MetaStats is a snapshot of a MetaCache's counters.
type MetaStats struct {
	Hits, NegativeHits, Misses uint64
	Entries                    int // including expired entries not yet looked up
}

// NewMetaCache returns an empty cache.
func NewMetaCache[V any](positiveTTL, negativeTTL time.Duration, maxEntries int) *MetaCache[V] {
	c := &MetaCache[V]{positiveTTL: positiveTTL, negativeTTL: negativeTTL, now: time.Now}
	if maxEntries > 0 {
		// NewLRU fails only for a size <= 0.
		c.entries, _ = simplelru.NewLRU[string, metaEntry[V]](maxEntries, nil)
	}
	return c
}

// SetClock replaces the clock used for expiry, for tests; nil restores
// time.Now.
func (c *MetaCache[V]) SetClock(now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// Lookup returns ok=false on a miss or an expired entry, and ok=true with
// exists=false for a cached negative entry.
func (c *MetaCache[V]) Lookup(key string) (v V, exists bool, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.misses++
		return v, false, false
	}
	e, found := c.entries.Get(key)
	if !found || !c.now().Before(e.expires) {
		if found {
			c.entries.Remove(key)
		}
		c.misses++
		return v, false, false
	}
	if !e.exists {
		c.negativeHits++
		return v, false, true
	}
	c.hits++
	return e.value, true, true
}

// Put caches v as the value found at key. With a positive TTL of 0 it only
// drops any entry for key, so that a stale negative one cannot outlive the
// name's creation.
func (c *MetaCache[V]) Put(key string, v V) {
	c.store(key, metaEntry[V]{value: v, exists: true}, c.positiveTTL)
}

// PutNegative caches that key does not exist. With a negative TTL of 0 it
// only drops any entry for key, so that a stale positive one cannot outlive
// the name's removal.
func (c *MetaCache[V]) PutNegative(key string) {
	c.store(key, metaEntry[V]{}, c.negativeTTL)
}

func (c *MetaCache[V]) store(key string, e metaEntry[V], ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		return
	}
	if ttl <= 0 {
		c.entries.Remove(key)
		return
	}
	e.expires = c.now().Add(ttl)
	c.entries.Add(key, e)
}

// Invalidate drops the entry for key.
func (c *MetaCache[V]) Invalidate(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries != nil {
		c.entries.Remove(key)
	}
}

// InvalidatePrefix drops the entry for prefix and every entry under it (keys
// are '/'-separated paths), as after a rename or removal of a directory.
// "dir" and "dir/" both drop "dir" and "dir/a/b" but keep "dir2". An empty
// prefix or "/" drops everything.
func (c *MetaCache[V]) InvalidatePrefix(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		return
	}
	dir := strings.TrimRight(prefix, "/")
	if dir == "" {
		c.entries.Purge()
		return
	}
	for _, key := range c.entries.Keys() {
		if key == dir || strings.HasPrefix(key, dir+"/") {
			c.entries.Remove(key)
		}
	}
}

// Stats returns a snapshot of the cache's counters.
func (c *MetaCache[V]) Stats() MetaStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := MetaStats{Hits: c.hits, NegativeHits: c.negativeHits, Misses: c.misses}
	if c.entries != nil {
		st.Entries = c.entries.Len()
	}
	return st
}
