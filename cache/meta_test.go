package cache

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for TTL tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestMeta(t *testing.T, positive, negative time.Duration, max int) (*MetaCache[int], *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := NewMetaCache[int](positive, negative, max)
	c.SetClock(clock.Now)
	return c, clock
}

// expectHit fails unless key is cached as existing with value want.
func expectHit(t *testing.T, c *MetaCache[int], key string, want int) {
	t.Helper()
	v, exists, ok := c.Lookup(key)
	if !ok || !exists || v != want {
		t.Fatalf("Lookup(%q) = %d, exists %v, ok %v; want %d, true, true", key, v, exists, ok, want)
	}
}

// expectNegative fails unless key is cached as not existing.
func expectNegative(t *testing.T, c *MetaCache[int], key string) {
	t.Helper()
	_, exists, ok := c.Lookup(key)
	if !ok || exists {
		t.Fatalf("Lookup(%q): exists %v, ok %v; want a negative entry", key, exists, ok)
	}
}

// expectMiss fails unless key is not cached.
func expectMiss(t *testing.T, c *MetaCache[int], key string) {
	t.Helper()
	if v, exists, ok := c.Lookup(key); ok {
		t.Fatalf("Lookup(%q) = %d, exists %v; want a miss", key, v, exists)
	}
}

func TestMetaPositiveEntryExpiresAfterTTL(t *testing.T) {
	c, clock := newTestMeta(t, 10*time.Second, time.Second, 10)
	c.Put("a/b", 42)
	clock.Advance(10*time.Second - time.Nanosecond)
	expectHit(t, c, "a/b", 42)
	clock.Advance(time.Nanosecond)
	expectMiss(t, c, "a/b")
	if n := c.Stats().Entries; n != 0 {
		t.Fatalf("Entries = %d after expiry, want 0", n)
	}
}

func TestMetaNegativeEntryExpiresAfterItsTTL(t *testing.T) {
	c, clock := newTestMeta(t, time.Hour, 2*time.Second, 10)
	c.PutNegative("gone")
	clock.Advance(2*time.Second - time.Nanosecond)
	expectNegative(t, c, "gone")
	clock.Advance(time.Nanosecond)
	expectMiss(t, c, "gone")
}

func TestMetaZeroNegativeTTLCachesNoAbsence(t *testing.T) {
	c, _ := newTestMeta(t, time.Hour, 0, 10)
	c.PutNegative("gone")
	expectMiss(t, c, "gone")
	if n := c.Stats().Entries; n != 0 {
		t.Fatalf("Entries = %d, want 0", n)
	}
}

func TestMetaZeroNegativeTTLStillDropsStalePositive(t *testing.T) {
	c, _ := newTestMeta(t, time.Hour, 0, 10)
	c.Put("f", 1)
	c.PutNegative("f")
	expectMiss(t, c, "f")
}

func TestMetaZeroPositiveTTLCachesOnlyAbsence(t *testing.T) {
	c, _ := newTestMeta(t, 0, time.Hour, 10)
	c.Put("f", 1)
	expectMiss(t, c, "f")
	c.PutNegative("g")
	expectNegative(t, c, "g")
	// The name appears: its negative entry must not outlive that.
	c.Put("g", 2)
	expectMiss(t, c, "g")
}

func TestMetaPutReplacesNegativeEntry(t *testing.T) {
	c, _ := newTestMeta(t, time.Hour, time.Hour, 10)
	c.PutNegative("f")
	c.Put("f", 5)
	expectHit(t, c, "f", 5)
	c.PutNegative("f")
	expectNegative(t, c, "f")
}

func TestMetaEvictsLeastRecentlyUsedBeyondMaxEntries(t *testing.T) {
	c, _ := newTestMeta(t, time.Hour, time.Hour, 2)
	c.Put("a", 1)
	c.PutNegative("b")
	expectHit(t, c, "a", 1) // b is now least recently used
	c.Put("c", 3)
	expectMiss(t, c, "b")
	expectHit(t, c, "a", 1)
	expectHit(t, c, "c", 3)
	if n := c.Stats().Entries; n != 2 {
		t.Fatalf("Entries = %d, want 2", n)
	}
}

func TestMetaNonPositiveMaxEntriesCachesNothing(t *testing.T) {
	c, _ := newTestMeta(t, time.Hour, time.Hour, 0)
	c.Put("a", 1)
	c.PutNegative("b")
	expectMiss(t, c, "a")
	expectMiss(t, c, "b")
	c.Invalidate("a")
	c.InvalidatePrefix("a")
	if st := c.Stats(); st.Entries != 0 || st.Misses != 2 {
		t.Fatalf("stats %+v, want no entries and 2 misses", st)
	}
}

func TestMetaInvalidate(t *testing.T) {
	c, _ := newTestMeta(t, time.Hour, time.Hour, 10)
	c.Put("a", 1)
	c.Put("a/b", 2)
	c.Invalidate("a")
	expectMiss(t, c, "a")
	expectHit(t, c, "a/b", 2)
}

func TestMetaInvalidatePrefixDropsSubtreeOnly(t *testing.T) {
	for _, prefix := range []string{"dir", "dir/"} {
		t.Run(prefix, func(t *testing.T) {
			c, _ := newTestMeta(t, time.Hour, time.Hour, 10)
			c.Put("dir", 1)
			c.Put("dir/a", 2)
			c.PutNegative("dir/sub/missing")
			c.Put("dir2", 3)
			c.Put("dirx/a", 4)
			c.Put("other/dir/a", 5)

			c.InvalidatePrefix(prefix)
			expectMiss(t, c, "dir")
			expectMiss(t, c, "dir/a")
			expectMiss(t, c, "dir/sub/missing")
			expectHit(t, c, "dir2", 3)
			expectHit(t, c, "dirx/a", 4)
			expectHit(t, c, "other/dir/a", 5)
		})
	}
}

func TestMetaInvalidatePrefixOfRootDropsEverything(t *testing.T) {
	for _, prefix := range []string{"", "/"} {
		c, _ := newTestMeta(t, time.Hour, time.Hour, 10)
		c.Put("a", 1)
		c.Put("/b/c", 2)
		c.PutNegative("d")
		c.InvalidatePrefix(prefix)
		if n := c.Stats().Entries; n != 0 {
			t.Fatalf("InvalidatePrefix(%q) left %d entries", prefix, n)
		}
	}
}

func TestMetaStatsCountHitsNegativeHitsAndMisses(t *testing.T) {
	c, clock := newTestMeta(t, time.Second, time.Second, 10)
	c.Put("a", 1)
	c.PutNegative("b")
	expectHit(t, c, "a", 1)
	expectHit(t, c, "a", 1)
	expectNegative(t, c, "b")
	expectMiss(t, c, "c")
	clock.Advance(time.Second)
	expectMiss(t, c, "a") // expired counts as a miss
	st := c.Stats()
	want := MetaStats{Hits: 2, NegativeHits: 1, Misses: 2, Entries: 1}
	if st != want {
		t.Fatalf("Stats() = %+v, want %+v", st, want)
	}
}

func TestMetaSetClockNilRestoresWallClock(t *testing.T) {
	c, _ := newTestMeta(t, time.Hour, time.Hour, 10)
	c.SetClock(nil)
	c.Put("a", 1) // would panic on a nil clock
	expectHit(t, c, "a", 1)
}

func TestMetaConcurrentUse(t *testing.T) {
	c, clock := newTestMeta(t, time.Second, time.Second, 64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				k := fmt.Sprintf("d%d/f%d", i%4, i%32)
				switch (g + i) % 6 {
				case 0:
					c.Put(k, i)
				case 1:
					c.PutNegative(k)
				case 2:
					c.Invalidate(k)
				case 3:
					c.InvalidatePrefix(fmt.Sprintf("d%d", i%4))
				case 4:
					clock.Advance(time.Millisecond)
				default:
					if v, exists, ok := c.Lookup(k); ok && exists && v%32 != i%32 {
						t.Errorf("Lookup(%q) = %d, a value put under another key", k, v)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Stats().Entries; n > 64 {
		t.Fatalf("Entries = %d beyond the bound of 64", n)
	}
}
