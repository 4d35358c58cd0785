package cache

import (
	"context"
	"testing"
	"time"
)

// putAhead hands the store a block of v as fetched ahead, keeping no
// reference (cacheFilled does the same for a read block).
func putAhead(t *testing.T, s *Store, key BlockKey, v byte) {
	t.Helper()
	b := newFilled(t, s, v)
	s.PutAhead(key, b)
	b.Release()
}

// Blocks fetched ahead of their reader are not cache: the cache limit (here
// one block, and zero) never evicts them, so the reader finds them.
func TestBlocksFetchedAheadOutliveTheCacheLimit(t *testing.T) {
	for _, cacheBlocks := range []int64{0, 1} {
		s := newTestStore(t, 16, cacheBlocks)
		for i := range 4 {
			putAhead(t, s, BlockKey{"ahead", int64(i)}, byte(i))
		}
		for i := range 4 {
			cacheFilled(t, s, BlockKey{"read", int64(i)}, 0xEE)
		}
		for i := range 4 {
			b := s.Get(BlockKey{"ahead", int64(i)})
			if b == nil || !allBytes(b, byte(i)) {
				t.Fatalf("cache limit %d blocks: block %d fetched ahead is gone (%v)", cacheBlocks, i, b)
			}
			b.Release()
		}
		// Read once, they are cache like any other: the limit applies.
		if st := s.Stats(); st.CachedBlocks > cacheBlocks {
			t.Fatalf("cache limit %d blocks: %d cached after every block was read", cacheBlocks, st.CachedBlocks)
		}
		if used := s.Budget().Used(); used > cacheBlocks*testBlockSize {
			t.Fatalf("cache limit %d blocks: %d bytes still taken from the budget", cacheBlocks, used)
		}
	}
}

// When memory is needed, idle read blocks go first. A prefetch (no wait)
// takes nothing more: it must not throw away blocks fetched ahead for
// another reader. A reader's own block takes them, oldest first; blocks in
// use are never taken.
func TestNewBlockEvictsBlocksFetchedAheadLast(t *testing.T) {
	s := newTestStore(t, 4, 4)
	putAhead(t, s, BlockKey{"a", 0}, 1)
	putAhead(t, s, BlockKey{"a", 1}, 2)
	cacheFilled(t, s, BlockKey{"r", 0}, 3)
	cacheFilled(t, s, BlockKey{"r", 1}, 4)
	held := s.Get(BlockKey{"r", 1}) // in use: never evicted
	defer held.Release()

	b := mustNewBlock(t, s)
	defer b.Release()
	if s.Contains(BlockKey{"r", 0}) || !s.Contains(BlockKey{"a", 0}) || !s.Contains(BlockKey{"a", 1}) {
		t.Fatal("the first block of memory should come from the idle read block")
	}
	if _, err := s.NewBlock(context.Background(), false); err != ErrNoMemory {
		t.Fatalf("a prefetch with only blocks fetched ahead left to evict got %v, want ErrNoMemory", err)
	}
	if !s.Contains(BlockKey{"a", 0}) || !s.Contains(BlockKey{"a", 1}) {
		t.Fatal("a prefetch evicted a block fetched ahead")
	}
	ctx := context.Background()
	c, err := s.NewBlock(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if s.Contains(BlockKey{"a", 0}) || !s.Contains(BlockKey{"a", 1}) || !s.Contains(BlockKey{"r", 1}) {
		t.Fatal("a reader's block should come from the oldest block fetched ahead")
	}
	d, err := s.NewBlock(ctx, true)
	if err != nil {
		t.Fatalf("the last block fetched ahead should have made room: %v", err)
	}
	defer d.Release()
	if _, err := s.NewBlock(context.Background(), false); err != ErrNoMemory {
		t.Fatalf("with every block in use, NewBlock gave %v, want ErrNoMemory", err)
	}
}

// Remove (an object that changed) drops its blocks fetched ahead too, and a
// read Put of the same key replaces one.
func TestRemoveAndPutReachBlocksFetchedAhead(t *testing.T) {
	s := newTestStore(t, 8, 8)
	putAhead(t, s, BlockKey{"x", 0}, 1)
	putAhead(t, s, BlockKey{"y", 0}, 2)
	s.Remove("x")
	if s.Contains(BlockKey{"x", 0}) || !s.Contains(BlockKey{"y", 0}) {
		t.Fatal("Remove should drop exactly the changed object's blocks fetched ahead")
	}
	cacheFilled(t, s, BlockKey{"y", 0}, 9)
	b := s.Get(BlockKey{"y", 0})
	if b == nil || !allBytes(b, 9) {
		t.Fatalf("Put should replace a block fetched ahead under the same key: %v", b)
	}
	b.Release()
	if st := s.Stats(); st.CachedBlocks != 1 || s.Budget().Used() != testBlockSize {
		t.Fatalf("%d blocks cached, %d bytes used; want one block", st.CachedBlocks, s.Budget().Used())
	}
}

// A block fetched ahead that nobody reads within AheadTTL (its reader
// closed the file) gives way to prefetches too; within it, it does not.
// The TTLs are one no busy machine gets near (an hour) and one the sleep
// is sure to pass (time.Sleep sleeps at least as long as asked).
func TestBlocksFetchedAheadAndNeverReadGiveWayAfterTheirTTL(t *testing.T) {
	aheadStore := func(ttl time.Duration) *Store {
		s, err := NewStore(StoreConfig{BlockSize: testBlockSize, MemoryLimit: 2 * testBlockSize,
			CacheLimit: 2 * testBlockSize, AheadTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		putAhead(t, s, BlockKey{"a", 0}, 1)
		putAhead(t, s, BlockKey{"a", 1}, 2)
		return s
	}
	s := aheadStore(time.Hour)
	if _, err := s.NewBlock(context.Background(), false); err != ErrNoMemory {
		t.Fatalf("a prefetch within the TTL got %v, want ErrNoMemory", err)
	}
	const ttl = 5 * time.Millisecond
	s = aheadStore(ttl)
	time.Sleep(2 * ttl)
	b, err := s.NewBlock(context.Background(), false)
	if err != nil {
		t.Fatalf("a prefetch after the TTL: %v", err)
	}
	defer b.Release()
	if s.Contains(BlockKey{"a", 0}) || !s.Contains(BlockKey{"a", 1}) {
		t.Fatal("the oldest stale block should have made room, and only it")
	}
}

// Keep holds a block for a reader still to come, cached or not: the cache
// limit (here one block, and zero) and other reads do not drop it, the
// reader's Get finds it and from then on it is cache like any other.
func TestKeptBlocksOutliveTheCacheLimitUntilRead(t *testing.T) {
	for _, cacheBlocks := range []int64{0, 1} {
		s := newTestStore(t, 16, cacheBlocks)
		inLRU := newFilled(t, s, 1)
		s.Put(BlockKey{"o", 0}, inLRU) // cached (with room for one), then kept
		s.Keep(BlockKey{"o", 0}, inLRU)
		inLRU.Release()
		notCached := newFilled(t, s, 2)
		s.Keep(BlockKey{"o", 1}, notCached)
		notCached.Release()
		for i := range 4 {
			cacheFilled(t, s, BlockKey{"other", int64(i)}, 0xEE)
		}
		for i := range 2 {
			b := s.Get(BlockKey{"o", int64(i)})
			if b == nil || !allBytes(b, byte(i+1)) {
				t.Fatalf("cache limit %d blocks: kept block %d is gone (%v)", cacheBlocks, i, b)
			}
			b.Release()
		}
		if st := s.Stats(); st.CachedBlocks > cacheBlocks {
			t.Fatalf("cache limit %d blocks: %d cached after the kept blocks were read", cacheBlocks, st.CachedBlocks)
		}
		// Keeping a key cached as another block changes nothing.
		b := s.Get(BlockKey{"o", 1})
		other := newFilled(t, s, 9)
		s.Keep(BlockKey{"o", 1}, other)
		other.Release()
		if got := s.Get(BlockKey{"o", 1}); cacheBlocks > 0 && (got != b || !allBytes(got, 2)) {
			t.Fatalf("Keep replaced the block cached under its key")
		} else if got != nil {
			got.Release()
		}
		if b != nil {
			b.Release()
		}
	}
}
