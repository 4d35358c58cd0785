package rdmaread

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSchedulerBoundsOpsAndBytes(t *testing.T) {
	s := NewScheduler(4, 10)
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

// With one slot, owners that keep the queue full are served in turn: a
// process with many threads gets no more than one with few.
func TestSchedulerServesOwnersInTurn(t *testing.T) {
	s := NewScheduler(1, 1<<30)
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
	s := NewScheduler(1, 100)
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
	s := NewScheduler(8, 10)
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
