// Package sched admits the server operations of GPU reads under bounds
// shared by every caller, fairly between caller processes.
package sched

import (
	"context"
	"sync"
	"time"
)

// Scheduler admits every server operation of GPU reads (a ranged GET of a
// chunk, or one RDMA transfer) under two bounds, operations in flight and
// bytes in flight, and shares them fairly between caller processes: waiting
// operations are granted round robin across processes, so eight equal
// processes get equal shares however many threads each runs.
type Scheduler struct {
	maxOps   int
	maxBytes int64

	mu     sync.Mutex
	ops    int
	bytes  int64
	queues map[int]*[]*ticket // owner -> its waiting operations, oldest first
	ring   []int              // owners with waiting operations, in turn order
	turn   int                // index into ring of the owner served next

	// observe, when set, is told how long each operation waited.
	observe func(time.Duration)
}

type ticket struct {
	owner   int
	n       int64
	ready   chan struct{}
	granted bool
}

// New bounds operations and bytes in flight. A single operation larger
// than maxBytes is admitted alone.
func New(maxOps int, maxBytes int64) *Scheduler {
	return &Scheduler{maxOps: maxOps, maxBytes: maxBytes, queues: map[int]*[]*ticket{}}
}

// OnWait has f told how long each operation waited for its turn; set it
// before the first Acquire.
func (s *Scheduler) OnWait(f func(time.Duration)) { s.observe = f }

// Acquire waits for owner's turn to run an operation of n bytes and returns
// the function that ends it. It gives up when ctx ends (the caller was
// interrupted or died), leaving its place to others.
func (s *Scheduler) Acquire(ctx context.Context, owner int, n int64) (func(), error) {
	start := time.Now()
	t := &ticket{owner: owner, n: n, ready: make(chan struct{})}
	s.mu.Lock()
	if len(s.ring) == 0 && s.fits(n) {
		s.grant(t)
		s.mu.Unlock()
		return s.releaser(t, start), nil
	}
	q := s.queues[owner]
	if q == nil {
		q = &[]*ticket{}
		s.queues[owner] = q
		s.ring = append(s.ring, owner)
	}
	*q = append(*q, t)
	s.mu.Unlock()

	select {
	case <-t.ready:
		return s.releaser(t, start), nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if t.granted { // granted as we gave up: hand it straight back
		s.mu.Unlock()
		s.release(t)
		return nil, ctx.Err()
	}
	s.dequeue(t)
	s.mu.Unlock()
	return nil, ctx.Err()
}

func (s *Scheduler) releaser(t *ticket, start time.Time) func() {
	if s.observe != nil {
		s.observe(time.Since(start))
	}
	var once sync.Once
	return func() { once.Do(func() { s.release(t) }) }
}

func (s *Scheduler) fits(n int64) bool {
	return s.ops < s.maxOps && (s.bytes+n <= s.maxBytes || s.ops == 0)
}

func (s *Scheduler) grant(t *ticket) {
	s.ops++
	s.bytes += t.n
	t.granted = true
	close(t.ready)
}

func (s *Scheduler) release(t *ticket) {
	s.mu.Lock()
	s.ops--
	s.bytes -= t.n
	s.dispatch()
	s.mu.Unlock()
}

// dispatch grants waiting operations, one owner at a time in turn, while
// they fit. It stops at the first that does not, so a large operation is
// not starved by a stream of small ones.
func (s *Scheduler) dispatch() {
	for len(s.ring) > 0 {
		s.turn %= len(s.ring)
		owner := s.ring[s.turn]
		q := s.queues[owner]
		t := (*q)[0]
		if !s.fits(t.n) {
			return
		}
		*q = (*q)[1:]
		s.grant(t)
		if len(*q) == 0 {
			s.dropOwner(s.turn)
		} else {
			s.turn++
		}
	}
}

func (s *Scheduler) dequeue(t *ticket) {
	q := s.queues[t.owner]
	if q == nil {
		return
	}
	for i, w := range *q {
		if w == t {
			*q = append((*q)[:i], (*q)[i+1:]...)
			break
		}
	}
	if len(*q) == 0 {
		for i, o := range s.ring {
			if o == t.owner {
				s.dropOwner(i)
				break
			}
		}
	}
	// The head may have been what blocked others.
	s.dispatch()
}

func (s *Scheduler) dropOwner(i int) {
	delete(s.queues, s.ring[i])
	s.ring = append(s.ring[:i], s.ring[i+1:]...)
	if s.turn > i {
		s.turn--
	}
}

// InFlight reports operations and bytes now admitted, and operations waiting.
func (s *Scheduler) InFlight() (ops int, bytes int64, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.queues {
		waiting += len(*q)
	}
	return s.ops, s.bytes, waiting
}
