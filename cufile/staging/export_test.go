package staging

import (
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

// What the tests of package staging_test, which drive stagers through the
// host stand-in, look at inside them.

// SlotIndex is slot's place in the ring of sc, a stager or one of its
// copiers; -1 for a slot not of that ring.
func SlotIndex(sc any, slot *cufile.Slot) int {
	s := ringOf(sc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs, ok := s.bySlot[slot]; ok {
		return rs.index
	}
	return -1
}

func ringOf(sc any) *stager {
	if c, ok := sc.(*copier); ok {
		return c.s
	}
	return sc.(*stager)
}

// Release gives back slot, held from st.
func Release(st cufile.Stager, slot *cufile.Slot) { st.(*stager).release(slot) }

// ReleaseAll gives back every held slot so the stager can close.
func ReleaseAll(st cufile.Stager) {
	s := st.(*stager)
	for _, slot := range s.slots {
		s.release(&slot.Slot)
	}
}

// StreamCount is how many copy streams st has.
func StreamCount(st cufile.Stager) int { return len(st.(*stager).streams) }

// CopierStream is the stream c copies on and how many open copiers use it.
func CopierStream(c cufile.Copier) (stream any, users int) {
	cp := c.(*copier)
	cp.s.mu.Lock()
	defer cp.s.mu.Unlock()
	return cp.stream, cp.stream.users
}

// SetGrowth sets how many bytes the ring pins at a time and how long it
// waits after pinning failed; restore puts the defaults back.
func SetGrowth(chunk int, pause time.Duration) (restore func()) {
	savedChunk, savedPause := growChunk, growPause
	growChunk, growPause = chunk, pause
	return func() { growChunk, growPause = savedChunk, savedPause }
}

// GrowPause is how long the ring waits before it tries to grow again.
func GrowPause() time.Duration { return growPause }

// SetMaxTwins sets how many twins a stager may make, and returns what puts
// it back.
func SetMaxTwins(n int) (restore func()) {
	old := maxTwins
	maxTwins = n
	return func() { maxTwins = old }
}
