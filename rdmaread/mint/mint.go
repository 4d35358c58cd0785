// Package mint turns imported device regions into RDMA tokens: the Minter
// interface, the TokenCache that keeps registrations across reads, and the
// minter over MinIO's libs3rdma.
package mint

import (
	"errors"
	"fmt"
	"sync"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// Errors of minting; each maps to a decline reason (rdmaread.DeclineFor).
var (
	// ErrOutOfBounds: a range outside the allocation or the registration.
	// The engine refuses a destination range outside the caller's
	// allocation with it too.
	ErrOutOfBounds = errors.New("destination range outside the allocation")
	// ErrNoMinter: no token minter on this host (library missing, no NIC).
	ErrNoMinter = errors.New("no RDMA token minter")
	// ErrRegistrationFailed: the buffer could not be registered with the NIC,
	// or a token could not be minted for it.
	ErrRegistrationFailed = errors.New("RDMA registration failed")
	// ErrTooLarge: beyond one registration (rdmatoken.MaxRegistration) or one server
	// operation (rdmatoken.MaxServerOp); split the read with rdmatoken.SplitRange.
	ErrTooLarge = errors.New("too large for one RDMA registration or operation")
)

// Minter turns an imported device region into RDMA tokens.
type Minter interface {
	Name() string   // "loopback", "libs3rdma", "cuobject"
	Fabric() string // "loopback", or the NIC fabric
	// Register makes [off, off+n) of alloc reachable by the fabric and
	// returns a registration minting tokens for it; n <= rdmatoken.MaxRegistration.
	// Registering is expensive (the NIC pins and maps the memory): keep
	// registrations and mint many tokens from each (TokenCache does).
	Register(alloc cufile.Allocation, off, n uint64) (Registration, error)
	// Close releases the minter; registrations must be released first.
	Close() error
}

// Registration is one registered region.
type Registration interface {
	// Token mints a token naming [off, off+n) of the region, off counted
	// from the region's start. Minters may name a different NIC in each
	// token (libs3rdma goes round the rails), so mint one per request.
	Token(off, n uint64) (string, error)
	// ReportFailure says a transfer with this token failed on the fabric,
	// so the minter can stop naming that NIC for a while. Not for declines:
	// a 501 says nothing about the NIC.
	ReportFailure(token string)
	// Release deregisters the region; no transfer may be in flight.
	Release() error
}

// TokenCache keeps registrations per allocation and reuses them across
// reads, since registering costs far more than minting. A registration
// covers the whole allocation when it fits one (rdmatoken.MaxRegistration), else a
// window of 2 x rdmatoken.MaxServerOp starting at a multiple of rdmatoken.MaxServerOp, which
// holds any part rdmatoken.SplitRange makes; registrations of one allocation thus
// never share a start address with different sizes (libs3rdma counts
// registrations per address and would keep the first size).
//
// Registrations live until ReleaseAllocation (the import is about to close)
// or Close. Methods are safe for concurrent use.
type TokenCache struct {
	minter Minter

	mu      sync.Mutex
	byAlloc map[cufile.Allocation][]*cachedReg
	pending map[windowKey]chan struct{} // registrations under way, closed when done
	live    int
}

type windowKey struct {
	alloc cufile.Allocation
	off   uint64
}

type cachedReg struct {
	alloc  cufile.Allocation
	off, n uint64
	reg    Registration
	users  int  // leases not yet released
	dead   bool // out of the cache; released with its last lease
}

// NewTokenCache caches m's registrations.
func NewTokenCache(m Minter) *TokenCache {
	return &TokenCache{minter: m, byAlloc: map[cufile.Allocation][]*cachedReg{}, pending: map[windowKey]chan struct{}{}}
}

// Lease is one read's use of a registration covering [off, off+n) of an
// allocation. It keeps the registration alive until Release.
type Lease struct {
	c        *TokenCache
	r        *cachedReg
	off, n   uint64
	released bool
}

// Acquire returns a lease on a registration covering [off, off+n) of
// alloc, registering on first use. n must not exceed rdmatoken.MaxServerOp. Every
// successful Acquire needs one Release.
func (c *TokenCache) Acquire(alloc cufile.Allocation, off, n uint64) (*Lease, error) {
	if n == 0 || off > alloc.Size() || n > alloc.Size()-off {
		return nil, fmt.Errorf("%w: %d bytes at %d of a %d-byte allocation", ErrOutOfBounds, n, off, alloc.Size())
	}
	if n > rdmatoken.MaxServerOp {
		return nil, fmt.Errorf("%w: %d bytes in one request, at most %d", ErrTooLarge, n, rdmatoken.MaxServerOp)
	}
	wOff, wLen := window(alloc.Size(), off)
	key := windowKey{alloc, wOff}
	c.mu.Lock()
	for {
		if l := c.reuseLocked(alloc, off, n); l != nil {
			c.mu.Unlock()
			return l, nil
		}
		// One registration per window at a time: reads that arrive while
		// it is under way wait for it rather than pin the memory again.
		wait, busy := c.pending[key]
		if !busy {
			break
		}
		c.mu.Unlock()
		<-wait
		c.mu.Lock()
	}
	done := make(chan struct{})
	c.pending[key] = done
	c.mu.Unlock()

	reg, err := c.minter.Register(alloc, wOff, wLen)

	c.mu.Lock()
	delete(c.pending, key)
	close(done)
	if err != nil {
		c.mu.Unlock()
		if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrNoMinter) && !errors.Is(err, ErrRegistrationFailed) {
			err = fmt.Errorf("%w: %w", ErrRegistrationFailed, err)
		}
		return nil, err
	}
	r := &cachedReg{alloc: alloc, off: wOff, n: wLen, reg: reg, users: 1}
	c.byAlloc[alloc] = append(c.byAlloc[alloc], r)
	c.live++
	c.mu.Unlock()
	return &Lease{c: c, r: r, off: off, n: n}, nil
}

// window is the region registered for a read at off.
func window(size, off uint64) (uint64, uint64) {
	if size <= rdmatoken.MaxRegistration {
		return 0, size
	}
	start := off &^ (rdmatoken.MaxServerOp - 1)
	return start, min(2*rdmatoken.MaxServerOp, size-start)
}

func (c *TokenCache) reuseLocked(alloc cufile.Allocation, off, n uint64) *Lease {
	for _, r := range c.byAlloc[alloc] {
		if off >= r.off && off+n <= r.off+r.n {
			r.users++
			return &Lease{c: c, r: r, off: off, n: n}
		}
	}
	return nil
}

// Token mints a token naming exactly the lease's range.
func (l *Lease) Token() (string, error) {
	tok, err := l.r.reg.Token(l.off-l.r.off, l.n)
	if err != nil && !errors.Is(err, ErrRegistrationFailed) {
		err = fmt.Errorf("%w: minting: %w", ErrRegistrationFailed, err)
	}
	return tok, err
}

// ReportFailure passes a fabric failure of token to the minter.
func (l *Lease) ReportFailure(token string) { l.r.reg.ReportFailure(token) }

// Release ends the read's use of the registration; it stays cached.
func (l *Lease) Release() error {
	c := l.c
	c.mu.Lock()
	if l.released {
		c.mu.Unlock()
		return nil
	}
	l.released = true
	l.r.users--
	drop := l.r.dead && l.r.users == 0
	c.mu.Unlock()
	if drop {
		return c.release(l.r)
	}
	return nil
}

// ReleaseAllocation deregisters every registration of alloc; call it before
// the import closes. Registrations still leased are deregistered at their
// last Release.
func (c *TokenCache) ReleaseAllocation(alloc cufile.Allocation) error {
	c.mu.Lock()
	regs := c.byAlloc[alloc]
	delete(c.byAlloc, alloc)
	var now []*cachedReg
	for _, r := range regs {
		r.dead = true
		if r.users == 0 {
			now = append(now, r)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, r := range now {
		errs = append(errs, c.release(r))
	}
	return errors.Join(errs...)
}

func (c *TokenCache) release(r *cachedReg) error {
	err := r.reg.Release()
	c.mu.Lock()
	c.live--
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("releasing the RDMA registration of %d bytes at %d: %w", r.n, r.off, err)
	}
	return nil
}

// Registrations is how many registrations are held now.
func (c *TokenCache) Registrations() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// Close releases every allocation's registrations (leased ones at their
// last Release); the minter stays open.
func (c *TokenCache) Close() error {
	c.mu.Lock()
	allocs := make([]cufile.Allocation, 0, len(c.byAlloc))
	for a := range c.byAlloc {
		allocs = append(allocs, a)
	}
	c.mu.Unlock()
	var errs []error
	for _, a := range allocs {
		errs = append(errs, c.ReleaseAllocation(a))
	}
	return errors.Join(errs...)
}
