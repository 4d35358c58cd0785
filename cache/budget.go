package cache

import (
	"container/list"
	"context"
	"fmt"
	"sync"
)

// Budget is a byte-counted semaphore shared by everything that holds block
// memory (prefetch buffers and cached blocks), so the daemon's memory holds
// under many open handles.
type Budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
	queue list.List // *ticket, oldest first
}

// ticket is one Acquire waiting in the queue. ready is closed once its bytes
// have been granted.
type ticket struct {
	n     int64
	ready chan struct{}
	elem  *list.Element
}

// grantedAtOnce is the ready channel of tickets that never had to wait.
var grantedAtOnce = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	if limit < 0 {
		panic(fmt.Sprintf("cache: negative budget limit %d", limit))
	}
	return &Budget{limit: limit}
}

// Limit returns the total number of bytes the budget hands out.
func (b *Budget) Limit() int64 { return b.limit }

// Used returns the number of bytes currently held.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// TryAcquire takes n bytes if they are free now. It fails while anyone is
// queued in Acquire, so that small requests cannot starve a large one.
func (b *Budget) TryAcquire(n int64) bool {
	if n < 0 {
		panic(fmt.Sprintf("cache: TryAcquire of negative size %d", n))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queue.Len() > 0 || b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// Acquire blocks until n bytes are free (FIFO among waiters so a large waiter
// is not starved), or ctx is done (returns ctx.Err()). n > Limit() returns an
// error at once.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if err := b.checkRequest(n); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.await(ctx, b.reserve(n))
}

// Release returns n bytes and hands them to queued waiters in order. Releasing
// more than is held is a bug and panics.
func (b *Budget) Release(n int64) {
	if n < 0 {
		panic(fmt.Sprintf("cache: Release of negative size %d", n))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.used {
		panic(fmt.Sprintf("cache: Release of %d bytes with only %d held", n, b.used))
	}
	b.used -= n
	b.grantQueuedLocked()
}

func (b *Budget) checkRequest(n int64) error {
	if n < 0 {
		return fmt.Errorf("cache: acquire of negative size %d", n)
	}
	if n > b.limit {
		return fmt.Errorf("cache: acquire of %d bytes exceeds the budget limit of %d", n, b.limit)
	}
	return nil
}

// reserve takes n bytes at once when nobody is queued and they fit; otherwise
// it queues a ticket that Release fills in order. Splitting this from await
// lets a Store join the queue while holding its own lock.
func (b *Budget) reserve(n int64) *ticket {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queue.Len() == 0 && b.used+n <= b.limit {
		b.used += n
		return &ticket{n: n, ready: grantedAtOnce}
	}
	t := &ticket{n: n, ready: make(chan struct{})}
	t.elem = b.queue.PushBack(t)
	return t
}

// await waits for t to be granted or ctx to end; in the latter case the
// ticket leaves the queue, or gives its bytes back if granted meanwhile.
func (b *Budget) await(ctx context.Context, t *ticket) error {
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-t.ready:
		b.used -= t.n
		b.grantQueuedLocked()
	default:
		wasFirst := b.queue.Front() == t.elem
		b.queue.Remove(t.elem)
		// Those behind a departing head may fit now.
		if wasFirst {
			b.grantQueuedLocked()
		}
	}
	return ctx.Err()
}

// grantQueuedLocked grants queued tickets, oldest first, while the oldest fits.
func (b *Budget) grantQueuedLocked() {
	for e := b.queue.Front(); e != nil; e = b.queue.Front() {
		t := e.Value.(*ticket)
		if b.used+t.n > b.limit {
			return
		}
		b.used += t.n
		b.queue.Remove(e)
		close(t.ready)
	}
}

// queued returns how many Acquire calls are waiting.
func (b *Budget) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queue.Len()
}
