package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// ErrNoMemory is returned by NewBlock without wait when the memory budget is
// held by blocks in use.
var ErrNoMemory = errors.New("cache: block memory budget exhausted")

// StoreConfig sizes a Store.
type StoreConfig struct {
	BlockSize   int   // bytes per block, e.g. 1 MiB
	MemoryLimit int64 // total bytes of block memory (prefetch + cache)
	CacheLimit  int64 // at most this many bytes held by the LRU cache (<= MemoryLimit)
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
	budget     *Budget
	free       freeList

	// waiting counts NewBlock calls that may queue on the budget; a Release
	// that leaves a block held only by the cache must then evict for them.
	waiting atomic.Int32

	mu        sync.Mutex
	lru       *simplelru.LRU[BlockKey, *Block] // bounded by bytes, not by its own size
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
	return &Store{
		blockSize:  cfg.BlockSize,
		cacheLimit: cfg.CacheLimit,
		budget:     NewBudget(cfg.MemoryLimit),
		lru:        lru,
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
// full it first evicts least-recently-used cached blocks; then, with
// wait=false, returns (nil, ErrNoMemory); with wait=true, blocks until memory
// is free or ctx is done.
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
	if s.evictIdleUntil(func() bool { return s.budget.TryAcquire(size) }) {
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
		s.misses++
		return nil
	}
	s.hits++
	// Under s.mu, so eviction cannot drop the cache's reference first.
	b.Retain()
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
	if s.cacheLimit < int64(s.blockSize) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.lru.Get(key); ok {
		if old == b {
			return
		}
		s.uncache(key, old)
	}
	if b.cached {
		s.uncache(b.cachedAs, b)
	}
	b.Retain()
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
	for _, key := range s.lru.Keys() {
		if key.Object != object {
			continue
		}
		if b, ok := s.lru.Peek(key); ok {
			s.uncache(key, b)
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
		CachedBytes:  s.cachedBytes(),
		CachedBlocks: int64(s.lru.Len()),
		InUseBytes:   s.budget.Used(),
	}
}

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
	s.lru.Remove(key)
	b.cached = false
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
// recently used first, until done reports true; it returns false if none is
// left first. Blocks in use are skipped and count as just used, since a reader
// has them. Caller holds s.mu.
func (s *Store) evictIdleUntil(done func() bool) bool {
	for skipped := 0; ; {
		if done() {
			return true
		}
		if skipped >= s.lru.Len() {
			return false
		}
		key, b, _ := s.lru.GetOldest()
		// Only Get adds readers and it holds s.mu, so a count of one
		// (the cache's own) cannot rise under us.
		if b.refs.Load() > 1 {
			s.lru.Get(key) // to the front, behind the ones still to look at
			skipped++
			continue
		}
		s.uncache(key, b)
		s.evictions++
	}
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
