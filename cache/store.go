package cache

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// ErrNoMemory is returned by NewBlock without wait when the memory budget is
// held by blocks in use; a read that meets it fails with ENOMEM.
var ErrNoMemory = errno.New(syscall.ENOMEM, "cache: block memory budget exhausted")

// StoreConfig sizes a Store.
type StoreConfig struct {
	BlockSize   int   // bytes per block, e.g. 1 MiB
	MemoryLimit int64 // total bytes of block memory (prefetch + cache)
	CacheLimit  int64 // at most this many bytes held by the LRU cache (<= MemoryLimit)
	// AheadTTL: how long a block fetched ahead is kept from other
	// prefetches for its reader (PutAhead); 0 means DefaultAheadTTL.
	AheadTTL time.Duration
}

// StoreStats is a snapshot of a Store's counters.
type StoreStats struct {
	Hits, Misses uint64
	Evictions    uint64 // blocks dropped to honour CacheLimit or to free memory
	CachedBytes  int64
	CachedBlocks int64
	InUseBytes   int64 // bytes taken from the budget, cached or not
}

// Store hands out blocks from a memory budget and caches filled ones in an
// LRU keyed by BlockKey.
type Store struct {
	blockSize  int
	cacheLimit int64
	aheadTTL   time.Duration
	budget     *Budget
	free       freeList

	// waiting counts NewBlock calls that may queue on the budget; a Release
	// that leaves a block held only by the cache must then evict for them.
	waiting atomic.Int32

	mu  sync.Mutex
	lru *simplelru.LRU[BlockKey, *Block] // bounded by bytes, not by its own size
	// ahead holds blocks fetched ahead of a reader that has not asked for
	// them yet, oldest first. They are prefetch memory, not cache: the
	// cache limit does not evict them (that would throw away a download
	// its reader is about to use); only the need for memory does, after
	// every idle block in lru.
	ahead     *simplelru.LRU[BlockKey, *Block]
	hits      uint64
	misses    uint64
	evictions uint64
}

// NewStore validates cfg and returns an empty store.
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("cache: StoreConfig.BlockSize must be positive, got %d", cfg.BlockSize)
	}
	if cfg.MemoryLimit < 2*int64(cfg.BlockSize) {
		return nil, fmt.Errorf("cache: StoreConfig.MemoryLimit (%d) must be at least twice BlockSize (%d)", cfg.MemoryLimit, cfg.BlockSize)
	}
	if cfg.CacheLimit < 0 || cfg.CacheLimit > cfg.MemoryLimit {
		return nil, fmt.Errorf("cache: StoreConfig.CacheLimit (%d) must be between 0 and MemoryLimit (%d)", cfg.CacheLimit, cfg.MemoryLimit)
	}
	lru, err := simplelru.NewLRU[BlockKey, *Block](math.MaxInt, nil)
	if err != nil {
		return nil, err
	}
	ahead, err := simplelru.NewLRU[BlockKey, *Block](math.MaxInt, nil)
	if err != nil {
		return nil, err
	}
	return &Store{
		blockSize:  cfg.BlockSize,
		cacheLimit: cfg.CacheLimit,
		aheadTTL:   cmp.Or(cfg.AheadTTL, DefaultAheadTTL),
		budget:     NewBudget(cfg.MemoryLimit),
		lru:        lru,
		ahead:      ahead,
	}, nil
}

// BlockSize returns the capacity of every block.
func (s *Store) BlockSize() int { return s.blockSize }

// Budget returns the budget all of the store's blocks are counted against.
// Memory taken from it directly does not make the store evict cached blocks;
// block memory should come from NewBlock.
func (s *Store) Budget() *Budget { return s.budget }

// NewBlock returns an empty block (len 0, cap BlockSize) holding one
// reference, its BlockSize bytes taken from the budget. When the budget is
// full it first evicts least-recently-used cached blocks (with wait=false
// only blocks read at least once, never ones fetched ahead: see PutAhead);
// then, with wait=false, returns (nil, ErrNoMemory); with wait=true, blocks
// until memory is free or ctx is done.
//
// Only cached blocks no reader holds are evicted for room: evicting one in use
// frees nothing and loses a block that is being read.
func (s *Store) NewBlock(ctx context.Context, wait bool) (*Block, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	size := int64(s.blockSize)
	if wait {
		// Counted before looking at the cache, so that any block a reader
		// lets go of from here on is evicted for us by its Release.
		s.waiting.Add(1)
		defer s.waiting.Add(-1)
	}

	s.mu.Lock()
	// A prefetch (no wait) takes room only from blocks already read and from
	// blocks fetched ahead that nobody came for within AheadTTL: it must not
	// throw away another prefetch's blocks before their reader comes. A
	// reader's own block may take any idle block.
	got := func() bool { return s.budget.TryAcquire(size) }
	if s.evictIdleFrom(s.lru, got) || s.evictStaleAhead(got) || (wait && s.evictIdleFrom(s.ahead, got)) {
		s.mu.Unlock()
		return s.newBlock(), nil
	}
	if !wait {
		s.mu.Unlock()
		return nil, ErrNoMemory
	}
	// Queued under s.mu, so that evictForWaiters (which takes s.mu) sees us.
	t := s.budget.reserve(size)
	s.mu.Unlock()

	if err := s.budget.await(ctx, t); err != nil {
		return nil, err
	}
	return s.newBlock(), nil
}

// Get returns the cached block with one reference for the caller, or nil.
// Counts a hit or a miss.
func (s *Store) Get(key BlockKey) *Block {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.lru.Get(key)
	if !ok {
		if b, ok = s.ahead.Peek(key); !ok {
			s.misses++
			return nil
		}
	}
	s.hits++
	// Under s.mu, so eviction cannot drop the cache's reference first.
	b.Retain()
	if b.ahead {
		// Read at last: from now on it is cache like any other block, under
		// the reference the ahead list held.
		s.ahead.Remove(key)
		b.cached, b.ahead = false, false
		s.cache(key, b)
	}
	return b
}

// Put inserts b under key; the cache takes its own reference (the caller
// keeps its own). Replaces an existing entry (releasing the old one). Evicts
// LRU blocks while cached bytes exceed CacheLimit. With CacheLimit 0 (or below
// BlockSize), Put keeps nothing. A block is cached under one key at most:
// putting it under another key moves it.
func (s *Store) Put(key BlockKey, b *Block) {
	if b.store != s {
		panic("cache: Put of a Block from another Store")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.lru.Peek(key); ok && old == b {
		s.lru.Get(key) // refresh
		return
	}
	s.forget(key, b)
	b.Retain()
	s.cache(key, b)
}

// PutAhead keeps b, fetched ahead of its reader, until the reader's first
// Get makes it an ordinary cached block. Until then CacheLimit does not
// evict it (it is prefetch memory, counted by the budget like any block);
// NewBlock does, as a last resort, oldest first. A key already cached is
// left as it is.
func (s *Store) PutAhead(key BlockKey, b *Block) {
	if b.store != s {
		panic("cache: PutAhead of a Block from another Store")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putAheadLocked(key, b)
}

// putAheadLocked is PutAhead with s.mu held.
func (s *Store) putAheadLocked(key BlockKey, b *Block) {
	if s.lru.Contains(key) || s.ahead.Contains(key) {
		return
	}
	if b.cached {
		s.uncache(b.cachedAs, b)
	}
	b.Retain()
	b.cached, b.cachedAs, b.ahead, b.aheadAt = true, key, true, time.Now()
	s.ahead.Add(key, b)
}

// Keep holds b for a reader that has yet to read it, as PutAhead does, also
// when b is cached already: a block one reader has passed and another close
// behind it will read is out of reach of the cache limit (and of other
// readers' churn of the LRU) until that reader's Get; memory pressure still
// takes it, as any block fetched ahead. A key cached as another block is
// left as it is.
func (s *Store) Keep(key BlockKey, b *Block) {
	if b.store != s {
		panic("cache: Keep of a Block from another Store")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case b.cached && b.cachedAs == key && b.ahead:
		b.aheadAt = time.Now()
		s.ahead.Get(key) // to the young end, as aheadAt says
	case b.cached && b.cachedAs == key:
		s.lru.Remove(key) // the cache's reference moves with it
		b.ahead, b.aheadAt = true, time.Now()
		s.ahead.Add(key, b)
	default:
		s.putAheadLocked(key, b)
	}
}

// forget drops what is cached under key and where b is cached, so that b
// can be cached under key. Caller holds s.mu.
func (s *Store) forget(key BlockKey, b *Block) {
	if old, ok := s.lru.Peek(key); ok {
		s.uncache(key, old)
	}
	if old, ok := s.ahead.Peek(key); ok {
		s.uncache(key, old)
	}
	if b.cached {
		s.uncache(b.cachedAs, b)
	}
}

// cache adds b, whose reference the caller has taken for the cache, to the
// LRU under key and evicts down to CacheLimit; with no room for a block it
// drops that reference instead. Caller holds s.mu.
func (s *Store) cache(key BlockKey, b *Block) {
	if s.cacheLimit < int64(s.blockSize) {
		b.drop()
		return
	}
	b.cached, b.cachedAs = true, key
	s.lru.Add(key, b)
	for s.cachedBytes() > s.cacheLimit {
		s.evictOldest()
	}
}

// Remove drops every cached block whose Object equals object (an object that
// changed on the server). Readers holding such blocks keep them until they
// release them.
func (s *Store) Remove(object string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, list := range []*simplelru.LRU[BlockKey, *Block]{s.lru, s.ahead} {
		for _, key := range list.Keys() {
			if key.Object != object {
				continue
			}
			if b, ok := list.Peek(key); ok {
				s.uncache(key, b)
			}
		}
	}
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StoreStats{
		Hits:         s.hits,
		Misses:       s.misses,
		Evictions:    s.evictions,
		CachedBytes:  int64(s.lru.Len()+s.ahead.Len()) * int64(s.blockSize),
		CachedBlocks: int64(s.lru.Len() + s.ahead.Len()),
		InUseBytes:   s.budget.Used(),
	}
}

// cachedBytes is what counts against CacheLimit: blocks read at least once.
func (s *Store) cachedBytes() int64 {
	return int64(s.lru.Len()) * int64(s.blockSize)
}

// newBlock wraps a buffer for memory already taken from the budget.
func (s *Store) newBlock() *Block {
	buf := s.free.get()
	if buf == nil {
		buf = make([]byte, s.blockSize)
	}
	b := &Block{Data: buf[:0], buf: buf, store: s}
	b.refs.Store(1)
	return b
}

// recycle takes back the memory of a block whose last reference is gone.
func (s *Store) recycle(b *Block) {
	buf := b.buf
	b.Data, b.buf = nil, nil
	s.free.put(buf)
	s.budget.Release(int64(s.blockSize))
}

// uncache drops the cache's entry and reference for b. Caller holds s.mu.
func (s *Store) uncache(key BlockKey, b *Block) {
	if b.ahead {
		s.ahead.Remove(key)
	} else {
		s.lru.Remove(key)
	}
	b.cached, b.ahead = false, false
	b.drop()
}

// evictOldest drops the least recently used block. Caller holds s.mu.
func (s *Store) evictOldest() {
	key, b, ok := s.lru.GetOldest()
	if !ok {
		return
	}
	s.uncache(key, b)
	s.evictions++
}

// evictIdleUntil evicts cached blocks that only the cache holds, least
// recently used first and blocks not read yet last, until done reports
// true; it returns false if none is left first. Blocks in use are skipped
// and count as just used, since a reader has them. Caller holds s.mu.
func (s *Store) evictIdleUntil(done func() bool) bool {
	return s.evictIdleFrom(s.lru, done) || s.evictIdleFrom(s.ahead, done)
}

func (s *Store) evictIdleFrom(list *simplelru.LRU[BlockKey, *Block], done func() bool) bool {
	for skipped := 0; ; {
		if done() {
			return true
		}
		if skipped >= list.Len() {
			return false
		}
		key, b, _ := list.GetOldest()
		// Only Get adds readers and it holds s.mu, so a count of one
		// (the cache's own) cannot rise under us.
		if b.refs.Load() > 1 {
			list.Get(key) // to the front, behind the ones still to look at
			skipped++
			continue
		}
		s.uncache(key, b)
		s.evictions++
	}
}

// DefaultAheadTTL is how long a block fetched ahead is kept from other
// prefetches for its reader; a reader that closed its file or went
// elsewhere never comes, and its blocks must not hold memory from
// prefetches for ever. A reader that takes longer than this over a window
// (128 MiB by default: under 5 MB/s) may find some of its blocks fetched
// again.
const DefaultAheadTTL = 30 * time.Second

// evictStaleAhead evicts idle blocks fetched ahead more than aheadTTL ago,
// oldest first, until done reports true. The list is in the order PutAhead
// added to it (blocks in use are moved to the back as they are passed), so
// the first block younger than aheadTTL ends the search. Caller holds s.mu.
func (s *Store) evictStaleAhead(done func() bool) bool {
	for skipped := 0; !done(); {
		if skipped >= s.ahead.Len() {
			return false
		}
		key, b, _ := s.ahead.GetOldest()
		if time.Since(b.aheadAt) < s.aheadTTL {
			return false
		}
		if b.refs.Load() > 1 {
			s.ahead.Get(key)
			skipped++
			continue
		}
		s.uncache(key, b)
		s.evictions++
	}
	return true
}

// evictForWaiters frees cached memory while budget waiters cannot be served.
func (s *Store) evictForWaiters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictIdleUntil(func() bool { return s.budget.queued() == 0 })
}

// freeList keeps the buffers of released blocks for reuse, to avoid
// allocation churn at GB/s. It never holds more buffers than the budget has
// admitted at its peak, because a buffer is only allocated when it is empty.
type freeList struct {
	mu   sync.Mutex
	bufs [][]byte
}

func (f *freeList) get() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.bufs)
	if n == 0 {
		return nil
	}
	buf := f.bufs[n-1]
	f.bufs[n-1] = nil
	f.bufs = f.bufs[:n-1]
	return buf
}

func (f *freeList) put(buf []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bufs = append(f.bufs, buf)
}
