package sched

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSchedulerBoundsOpsAndBytes(t *testing.T) {
	s := New(4, 10)
	var ops, bytes, maxOps, maxBytes atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(1 + i%4)
			release, err := s.Acquire(context.Background(), i%3, n)
			if err != nil {
				t.Error(err)
				return
			}
			o, b := ops.Add(1), bytes.Add(n)
			for v := maxOps.Load(); o > v && !maxOps.CompareAndSwap(v, o); v = maxOps.Load() {
			}
			for v := maxBytes.Load(); b > v && !maxBytes.CompareAndSwap(v, b); v = maxBytes.Load() {
			}
			time.Sleep(time.Millisecond)
			ops.Add(-1)
			bytes.Add(-n)
			release()
		}()
	}
	wg.Wait()
	if maxOps.Load() > 4 || maxBytes.Load() > 10 {
		t.Fatalf("peak %d ops, %d bytes; bounds are 4 and 10", maxOps.Load(), maxBytes.Load())
	}
	if o, b, w := s.InFlight(); o != 0 || b != 0 || w != 0 {
		t.Fatalf("after all released: %d ops, %d bytes, %d waiting", o, b, w)
	}
}

// holdAll starts one goroutine per size, each acquiring that many bytes
// for owner i%3 and holding them until ctx ends (a wait still queued then
// gives up), and waits until every one of them has been admitted or
// queued; it returns what the scheduler then reports. That state is
// reached however the goroutines are scheduled, so the counts are exact,
// not a sample.
func holdAll(ctx context.Context, t *testing.T, s *Scheduler, sizes []int64, wg *sync.WaitGroup) (ops int, bytes int64, waiting int) {
	t.Helper()
	ops0, _, waiting0 := s.InFlight()
	for i, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done, err := s.Acquire(ctx, i%3, n)
			if err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			<-ctx.Done()
			done()
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ops, bytes, waiting = s.InFlight()
		if ops+waiting == ops0+waiting0+len(sizes) {
			return ops, bytes, waiting
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, %d of %d operations admitted or queued", ops+waiting-ops0-waiting0, len(sizes))
		}
		time.Sleep(time.Millisecond)
	}
}

// The bounds are reached, not only kept: with more small operations
// waiting than maxOps, maxOps run at once; with more bytes asked for than
// maxBytes, operations up to maxBytes run together; and when one ends, the
// next waiting one takes its place.
func TestSchedulerFillsItsBounds(t *testing.T) {
	t.Run("ops", func(t *testing.T) {
		s := New(4, 1<<20)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		if ops, _, waiting := holdAll(ctx, t, s, []int64{1, 1, 1, 1, 1, 1, 1, 1, 1}, &wg); ops != 4 || waiting != 5 {
			t.Fatalf("9 one-byte operations under a bound of 4: %d admitted at once, %d waiting; want 4 and 5", ops, waiting)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		s := New(100, 10)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		ops, bytes, waiting := holdAll(ctx, t, s, []int64{2, 2, 2, 2, 2, 2, 2}, &wg)
		if ops != 5 || bytes != 10 || waiting != 2 {
			t.Fatalf("7 two-byte operations under a bound of 10 bytes: %d admitted (%d bytes), %d waiting; want 5 (10 bytes) and 2", ops, bytes, waiting)
		}
	})
	t.Run("replaced", func(t *testing.T) {
		s := New(2, 1<<20)
		// Both are admitted at once; the deadline ends a wait that a
		// scheduler not filling its bound would start.
		soon, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		first, err1 := s.Acquire(soon, 1, 1)
		second, err2 := s.Acquire(soon, 2, 1)
		if err1 != nil || err2 != nil {
			t.Fatalf("two operations under a bound of 2: %v, %v", err1, err2)
		}
		defer second()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		if ops, _, waiting := holdAll(ctx, t, s, []int64{1, 1}, &wg); ops != 2 || waiting != 2 {
			t.Fatalf("2 operations held and 2 more under a bound of 2: %d admitted, %d waiting", ops, waiting)
		}
		first()
		for deadline := time.Now().Add(30 * time.Second); ; {
			ops, _, waiting := s.InFlight()
			if ops == 2 && waiting == 1 {
				break
			}
			if ops > 2 || time.Now().After(deadline) {
				t.Fatalf("one of 2 operations ended with 2 waiting: %d admitted, %d waiting; want 2 and 1", ops, waiting)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// With one slot, owners that keep the queue full are served in turn: a
// process with many threads gets no more than one with few.
func TestSchedulerServesOwnersInTurn(t *testing.T) {
	s := New(1, 1<<30)
	hold, err := s.Acquire(context.Background(), 99, 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	// Owner 1 queues 6 operations, owners 2 and 3 queue 2 each.
	enqueue := func(owner int) {
		_, _, before := s.InFlight()
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := s.Acquire(context.Background(), owner, 1)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, owner)
			mu.Unlock()
			release()
		}()
		for { // wait until it is queued, so the arrival order is known
			if _, _, w := s.InFlight(); w > before {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range 6 {
		enqueue(1)
	}
	enqueue(2)
	enqueue(2)
	enqueue(3)
	enqueue(3)
	hold()
	wg.Wait()
	// The first six grants must include both of owner 2's and owner 3's.
	counts := map[int]int{}
	for _, o := range order[:6] {
		counts[o]++
	}
	if counts[2] != 2 || counts[3] != 2 || counts[1] != 2 {
		t.Fatalf("grant order %v: owners were not served in turn", order)
	}
}

func queued(s *Scheduler, owner int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[owner]
	return q != nil && len(*q) > 0
}

func TestSchedulerCancelLeavesQueue(t *testing.T) {
	s := New(1, 100)
	hold, _ := s.Acquire(context.Background(), 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, 2, 1)
		done <- err
	}()
	for !queued(s, 2) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	if _, _, w := s.InFlight(); w != 0 {
		t.Fatalf("%d still waiting after cancel", w)
	}
	hold()
	// Capacity is whole again.
	r, err := s.Acquire(context.Background(), 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	r()
	r() // releasing twice is harmless
	if o, b, _ := s.InFlight(); o != 0 || b != 0 {
		t.Fatalf("%d ops, %d bytes left", o, b)
	}
}

func TestSchedulerAdmitsOversizedOperationAlone(t *testing.T) {
	s := New(8, 10)
	r, err := s.Acquire(context.Background(), 1, 50)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, 2, 1); err == nil {
		t.Fatal("a second operation was admitted beside one over the byte bound")
	}
	r()
}
