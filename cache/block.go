package cache

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Block is one fixed-size piece of one object version, reference counted so
// that a buffer is reused only after every reader is done with it.
type Block struct {
	// Data holds the block's valid bytes; its capacity is the store's block
	// size.
	Data []byte

	store *Store
	buf   []byte // the buffer Data was cut from, returned to the free list
	refs  atomic.Int32

	// Guarded by store.mu.
	cached   bool
	cachedAs BlockKey
	ahead    bool      // cached by PutAhead and not read since
	aheadAt  time.Time // when PutAhead took it
}

// BlockKey names a block. Object is an opaque string naming one version of
// one object (the caller builds it from bucket, key and ETag or size+mtime);
// Index is offset/BlockSize.
type BlockKey struct {
	Object string
	Index  int64
}

// Retain adds a reference for a new holder of b.
func (b *Block) Retain() {
	if b.refs.Add(1) <= 1 {
		panic("cache: Retain of a released Block")
	}
}

// Release drops one reference. The last release returns the buffer to the
// store's free list and its bytes to the Budget.
func (b *Block) Release() {
	// A block left held only by the cache can be evicted for a NewBlock
	// caller waiting on memory; nothing else would wake that caller.
	if b.drop() > 0 && b.store.waiting.Load() > 0 {
		b.store.evictForWaiters()
	}
}

// drop releases one reference without looking for waiters, so that the store
// can call it while holding its lock.
func (b *Block) drop() int32 {
	r := b.refs.Add(-1)
	switch {
	case r < 0:
		panic("cache: Block released more times than retained")
	case r == 0:
		b.store.recycle(b)
	}
	return r
}

// String describes b for test failures and logs.
func (b *Block) String() string {
	return fmt.Sprintf("Block(len=%d refs=%d)", len(b.Data), b.refs.Load())
}
