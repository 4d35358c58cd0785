package mint

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// sizedAlloc is an allocation of a given size and nothing else: the cache
// only measures and keys allocations.
type sizedAlloc struct{ size uint64 }

func (a *sizedAlloc) Device() int  { return 0 }
func (a *sizedAlloc) Size() uint64 { return a.size }
func (a *sizedAlloc) Close() error { return nil }

// countingMinter registers nothing; it records what it was asked to.
type countingMinter struct {
	mu       sync.Mutex
	live     map[string]int // "alloc off n" -> registrations
	regs     int
	failNext error
	starts   map[uint64]uint64 // window start -> size, per allocation of the test
}

func newCountingMinter() *countingMinter {
	return &countingMinter{live: map[string]int{}, starts: map[uint64]uint64{}}
}

func (m *countingMinter) Name() string   { return "counting" }
func (m *countingMinter) Fabric() string { return "none" }
func (m *countingMinter) Close() error   { return nil }

func (m *countingMinter) Register(alloc cufile.Allocation, off, n uint64) (Registration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		return nil, err
	}
	if n > rdmatoken.MaxRegistration || off+n > alloc.Size() {
		return nil, fmt.Errorf("%w: %d at %d", ErrTooLarge, n, off)
	}
	if size, ok := m.starts[off]; ok && size != n {
		return nil, fmt.Errorf("start %d registered with sizes %d and %d", off, size, n)
	}
	m.starts[off] = n
	key := fmt.Sprintf("%p %d %d", alloc, off, n)
	m.live[key]++
	m.regs++
	return &countingReg{m: m, key: key, off: off, n: n}, nil
}

func (m *countingMinter) liveCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := 0
	for _, v := range m.live {
		total += v
	}
	return total
}

type countingReg struct {
	m      *countingMinter
	key    string
	off, n uint64
	gone   bool
}

func (r *countingReg) Token(off, n uint64) (string, error) {
	if r.gone || off+n > r.n {
		return "", fmt.Errorf("token for %d at %d of a %d-byte registration (released %v)", n, off, r.n, r.gone)
	}
	return rdmatoken.Token{Addr: r.off + off, Size: uint32(n)}.String(), nil
}

func (r *countingReg) ReportFailure(string) {}

func (r *countingReg) Release() error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if r.gone {
		return errors.New("released twice")
	}
	r.gone = true
	r.m.live[r.key]--
	return nil
}

func TestTokenCacheReusesOneRegistrationPerSmallAllocation(t *testing.T) {
	m := newCountingMinter()
	c := NewTokenCache(m)
	a := &sizedAlloc{size: 64 << 20}
	for i, r := range []struct{ off, n uint64 }{{0, 1 << 20}, {5 << 20, 3 << 20}, {0, 64 << 20}, {63 << 20, 1 << 20}} {
		l, err := c.Acquire(a, r.off, r.n)
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Token()
		if err != nil {
			t.Fatal(err)
		}
		tok, err := rdmatoken.Parse(s)
		if err != nil || tok.Addr != r.off || uint64(tok.Size) != r.n {
			t.Errorf("read %d: token %+v (%v), want %d bytes at %d", i, tok, err, r.n, r.off)
		}
		l.Release()
		l.Release() // twice is harmless
	}
	if m.regs != 1 || c.Registrations() != 1 {
		t.Fatalf("%d registrations made, %d held; want 1 reused", m.regs, c.Registrations())
	}
	if err := c.ReleaseAllocation(a); err != nil {
		t.Fatal(err)
	}
	if m.liveCount() != 0 || c.Registrations() != 0 {
		t.Fatalf("%d still registered after ReleaseAllocation", m.liveCount())
	}
}

func TestTokenCacheWindowsOfALargeAllocation(t *testing.T) {
	m := newCountingMinter()
	c := NewTokenCache(m)
	const G = rdmatoken.MaxServerOp
	a := &sizedAlloc{size: 10*G + 12345}
	// Parts as SplitRange makes them, at unaligned destinations.
	var leases []*Lease
	for _, dst := range []uint64{0, G / 2, 3*G - 7, 9*G + 1} {
		for _, p := range rdmatoken.SplitRange(0, int64(min(uint64(2*G+5), a.size-dst)), rdmatoken.MaxServerOp) {
			off, n := dst+uint64(p.Off), uint64(p.Len)
			l, err := c.Acquire(a, off, n)
			if err != nil {
				t.Fatalf("part %d at %d: %v", n, off, err)
			}
			s, _ := l.Token()
			if tok, _ := rdmatoken.Parse(s); tok.Addr != off || uint64(tok.Size) != n {
				t.Fatalf("token %+v for %d bytes at %d", tok, n, off)
			}
			leases = append(leases, l)
		}
	}
	for start, size := range m.starts {
		if start%G != 0 || size > rdmatoken.MaxRegistration {
			t.Errorf("window at %d of %d bytes", start, size)
		}
	}
	held := c.Registrations()
	if held == 0 || held != m.liveCount() {
		t.Fatalf("cache holds %d, minter has %d", held, m.liveCount())
	}
	// Release while leased: the registrations outlive the call until their
	// last lease ends.
	if err := c.ReleaseAllocation(a); err != nil {
		t.Fatal(err)
	}
	if m.liveCount() != held {
		t.Fatalf("leased registrations released early: %d of %d left", m.liveCount(), held)
	}
	for _, l := range leases {
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if m.liveCount() != 0 || c.Registrations() != 0 {
		t.Fatalf("%d registrations left", m.liveCount())
	}
}

func TestTokenCacheConcurrentFirstUseKeepsOne(t *testing.T) {
	m := newCountingMinter()
	c := NewTokenCache(m)
	a := &sizedAlloc{size: 1 << 20}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(a, uint64(i)*4096, 4096)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := l.Token(); err != nil {
				t.Error(err)
			}
			l.Release()
		}()
	}
	wg.Wait()
	if c.Registrations() != 1 || m.liveCount() != 1 || m.regs != 1 {
		t.Fatalf("cache %d, minter %d registrations (%d made); want 1", c.Registrations(), m.liveCount(), m.regs)
	}
	c.Close()
	if m.liveCount() != 0 {
		t.Fatal("Close left registrations")
	}
}

func TestTokenCacheErrors(t *testing.T) {
	m := newCountingMinter()
	c := NewTokenCache(m)
	a := &sizedAlloc{size: 4 << 30}
	if _, err := c.Acquire(a, 0, rdmatoken.MaxServerOp+1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over rdmatoken.MaxServerOp: %v", err)
	}
	if _, err := c.Acquire(a, 4<<30-10, 11); !errors.Is(err, ErrOutOfBounds) {
		t.Errorf("past the end: %v", err)
	}
	if _, err := c.Acquire(a, 0, 0); !errors.Is(err, ErrOutOfBounds) {
		t.Errorf("empty: %v", err)
	}
	m.failNext = errors.New("ibv_reg_mr: Bad address")
	if _, err := c.Acquire(a, 0, 10); !errors.Is(err, ErrRegistrationFailed) {
		t.Errorf("failed registration: %v", err)
	}
	if c.Registrations() != 0 {
		t.Error("a failed registration was cached")
	}
	// The next read tries again.
	l, err := c.Acquire(a, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
}
