package cache

import (
	"context"
	"errors"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// acquireAsync runs Acquire in a goroutine; the returned channel yields its
// result.
func acquireAsync(ctx context.Context, b *Budget, n int64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.Acquire(ctx, n) }()
	return done
}

// waitQueued yields until n Acquire calls are queued on b. It fails the test
// if one of the given calls returns instead of queueing.
func waitQueued(t *testing.T, b *Budget, n int, calls ...<-chan error) {
	t.Helper()
	for b.queued() < n {
		for _, c := range calls {
			select {
			case err := <-c:
				t.Fatalf("call returned (%v) instead of waiting", err)
			default:
			}
		}
		runtime.Gosched()
	}
}

// stillWaiting fails the test if the call has already returned.
func stillWaiting(t *testing.T, call <-chan error) {
	t.Helper()
	select {
	case err := <-call:
		t.Fatalf("call returned (%v) while it should be waiting", err)
	default:
	}
}

func TestBudgetTryAcquireAndRelease(t *testing.T) {
	b := NewBudget(10)
	if b.Limit() != 10 {
		t.Fatalf("Limit() = %d, want 10", b.Limit())
	}
	if !b.TryAcquire(4) {
		t.Fatal("TryAcquire(4) of an empty budget failed")
	}
	if b.TryAcquire(7) {
		t.Fatal("TryAcquire(7) succeeded with only 6 free")
	}
	if !b.TryAcquire(6) {
		t.Fatal("TryAcquire(6) failed with 6 free")
	}
	if got := b.Used(); got != 10 {
		t.Fatalf("Used() = %d, want 10", got)
	}
	b.Release(10)
	if got := b.Used(); got != 0 {
		t.Fatalf("Used() after release = %d, want 0", got)
	}
	if b.TryAcquire(11) {
		t.Fatal("TryAcquire beyond the limit succeeded")
	}
}

func TestBudgetReleaseOfMoreThanHeldPanics(t *testing.T) {
	b := NewBudget(10)
	b.TryAcquire(3)
	defer func() {
		if recover() == nil {
			t.Fatal("Release(4) with 3 held did not panic")
		}
	}()
	b.Release(4)
}

func TestBudgetAcquireBeyondLimitFailsAtOnce(t *testing.T) {
	b := NewBudget(10)
	b.TryAcquire(10)
	err := b.Acquire(context.Background(), 11)
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Acquire(11) of a 10-byte budget = %v, want an error about the limit", err)
	}
	if b.queued() != 0 || b.Used() != 10 {
		t.Fatalf("failed Acquire changed the budget: queued %d, used %d", b.queued(), b.Used())
	}
}

func TestBudgetAcquireWaitsForEnoughRelease(t *testing.T) {
	b := NewBudget(10)
	b.TryAcquire(10)
	call := acquireAsync(context.Background(), b, 4)
	waitQueued(t, b, 1, call)

	b.Release(3)
	// Release grants synchronously, so the state is settled here.
	if b.queued() != 1 {
		t.Fatal("Acquire(4) was granted with only 3 bytes free")
	}
	stillWaiting(t, call)
	b.Release(1)
	if err := <-call; err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	if got := b.Used(); got != 10 {
		t.Fatalf("Used() = %d, want 10", got)
	}
}

func TestBudgetServesWaitersInOrder(t *testing.T) {
	b := NewBudget(10)
	b.TryAcquire(8)
	large := acquireAsync(context.Background(), b, 6)
	waitQueued(t, b, 1, large)

	// Two bytes are free, but the large waiter came first.
	if b.TryAcquire(2) {
		t.Fatal("TryAcquire jumped ahead of a queued waiter")
	}
	small := acquireAsync(context.Background(), b, 2)
	waitQueued(t, b, 2, large, small)

	b.Release(4) // 4 held: room for the large waiter only
	if err := <-large; err != nil {
		t.Fatalf("large Acquire = %v", err)
	}
	if b.queued() != 1 {
		t.Fatalf("queued = %d after serving the large waiter, want 1", b.queued())
	}
	stillWaiting(t, small)
	b.Release(2)
	if err := <-small; err != nil {
		t.Fatalf("small Acquire = %v", err)
	}
	if got := b.Used(); got != 10 {
		t.Fatalf("Used() = %d, want 10", got)
	}
}

func TestBudgetAcquireHonoursCancellation(t *testing.T) {
	b := NewBudget(10)
	b.TryAcquire(10)
	ctx, cancel := context.WithCancel(context.Background())
	call := acquireAsync(ctx, b, 5)
	waitQueued(t, b, 1, call)

	cancel()
	if err := <-call; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after cancel = %v, want context.Canceled", err)
	}
	if b.queued() != 0 {
		t.Fatal("cancelled Acquire is still queued")
	}
	b.Release(10)
	if got := b.Used(); got != 0 {
		t.Fatalf("Used() = %d, want 0: a cancelled Acquire kept bytes", got)
	}
}

func TestBudgetAcquireWithDoneContextTakesNothing(t *testing.T) {
	b := NewBudget(10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Acquire(ctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done context = %v, want context.Canceled", err)
	}
	if got := b.Used(); got != 0 {
		t.Fatalf("Used() = %d, want 0", got)
	}
}

func TestBudgetCancelledHeadLetsOthersThrough(t *testing.T) {
	b := NewBudget(10)
	b.TryAcquire(6)
	ctx, cancel := context.WithCancel(context.Background())
	head := acquireAsync(ctx, b, 8)
	waitQueued(t, b, 1, head)
	next := acquireAsync(context.Background(), b, 2)
	waitQueued(t, b, 2, head, next)

	cancel()
	if err := <-head; !errors.Is(err, context.Canceled) {
		t.Fatalf("head Acquire = %v, want context.Canceled", err)
	}
	// The head leaves before its Acquire returns, so the next is served by now.
	if b.queued() != 0 {
		t.Fatal("Acquire behind a cancelled head is still queued with room for it")
	}
	if err := <-next; err != nil {
		t.Fatalf("Acquire behind a cancelled head = %v", err)
	}
	if got := b.Used(); got != 8 {
		t.Fatalf("Used() = %d, want 8", got)
	}
}

func TestBudgetConcurrentUseStaysWithinLimit(t *testing.T) {
	const limit = 100
	b := NewBudget(limit)
	var held atomic.Int64 // bytes the goroutines think they hold
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for range 300 {
				n := int64(1 + rng.Intn(limit))
				if err := b.Acquire(context.Background(), n); err != nil {
					t.Errorf("Acquire(%d) = %v", n, err)
					return
				}
				if h := held.Add(n); h > limit {
					t.Errorf("%d bytes held at once, limit %d", h, limit)
				}
				if u := b.Used(); u > limit {
					t.Errorf("Used() = %d, limit %d", u, limit)
				}
				runtime.Gosched()
				held.Add(-n)
				b.Release(n)
			}
		}()
	}
	wg.Wait()
	if got := b.Used(); got != 0 {
		t.Fatalf("Used() = %d after every release, want 0", got)
	}
}
