// Package loopback emulates one-sided RDMA writes and reads inside one process, so the
// tests and the demo can drive the whole S3-over-RDMA control path on
// machines without an RDMA NIC. It is reported as fabric "loopback"
// everywhere and is not a network transport: the "remote write" is a copy
// through the cufile layer into the registered allocation.
//
// A Fabric registers regions of allocations and mints tokens in the real
// 81-character format naming them. A Server sits in front of a real S3
// endpoint: it proxies requests without a token unchanged; for a GET with a
// token it forwards the signed request as is (the upstream, without RDMA,
// ignores the token and sends the body), writes the body into the region
// the token names, and answers as an RDMA server does: x-amz-rdma-reply,
// x-amz-rdma-bytes-transferred, no body. For a PUT (an UploadPart or a
// whole object) with a token and no body it reads the token's bytes out of
// the region (the "remote read": a device-to-host copy through the cufile
// layer), sends the signed request upstream with them as its body, and
// answers the upstream's reply with the same RDMA headers.
package loopback

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// Name is both the minter's name and its fabric's.
const Name = "loopback"

// Fake addresses live in a range no process maps on x86-64 or arm64 (above
// the 48-bit user space), one 8 GiB slot per registration, so a loopback
// token is never mistaken for a real buffer's.
const (
	baseAddress = 0x4c4f_4f50_0000_0000 // "LOOP"
	slotStride  = 8 << 30
)

// loopbackGID is ::ffff:127.0.0.1, the IPv4-mapped GID RoCE v2 would use.
var loopbackGID = [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}

// nextDCT numbers fabrics, so that a token of one fabric is refused by
// another.
var nextDCT atomic.Uint32

// Mode makes the fabric behave as a server or NIC that fails in one way.
type Mode int

const (
	Normal Mode = iota
	// Decline501: answer a GET or PUT with a token 501 NotImplemented,
	// no object.
	Decline501
	// IgnoreToken: proxy the request unchanged, as a server without RDMA:
	// a GET gets its body, a PUT stores the empty body it has.
	IgnoreToken
	// FailRegistration: Register fails, as ibv_reg_mr does on memory it
	// cannot pin.
	FailRegistration
	// ShortTransfer: write (for a PUT: read and store) and report half
	// the bytes asked for.
	ShortTransfer
	// RejectToken: answer 400 InvalidToken.
	RejectToken
	// Stall: hold the request for the stall duration (SetStall) or until
	// the client gives up, then serve it normally.
	Stall
)

var modeNames = [...]string{"normal", "decline_501", "ignore_token", "fail_registration", "short_transfer", "reject_token", "stall"}

func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// DefaultStall is how long Stall holds a request unless SetStall says.
const DefaultStall = time.Minute

// Stats counts what the fabric did.
type Stats struct {
	Regions             int   // registered now
	Registrations       int64 // Register calls that succeeded
	FailedRegistrations int64
	Deregistrations     int64
	FailureReports      int64 // ReportFailure calls
	Served              int64 // GETs and PUTs answered with an RDMA reply (short ones too)
	PutsServed          int64 // of them, PUTs: bytes read out of a region and stored upstream
	ServedBytes         int64 // bytes written into regions, or read out of them for PUTs
	Short               int64
	Declined            int64 // 501s
	Ignored             int64 // GETs with a token proxied with their body
	Rejected            int64 // tokens refused (RejectToken, or naming no region)
	Stalled             int64
	// ServeNanos is the time spent on token GETs whose token checked out,
	// however they ended: the upstream GET and the write into the region,
	// the fabric's own share of an RDMA read.
	ServeNanos  int64
	Passthrough int64 // requests without a token
}

// Fabric holds registered regions. It implements mint.Minter.
type Fabric struct {
	dct uint32

	mu       sync.Mutex
	regions  map[uint32]*region // by rkey
	nextRKey uint32
	nextSlot uint64
	mode     Mode
	modeLeft int // uses left in mode; 0 while the mode is unbounded
	stall    time.Duration
	stats    Stats
}

type region struct {
	rkey     uint32
	base     uint64 // fake address of the region's first byte
	size     uint64
	alloc    cufile.Allocation
	allocOff uint64 // where the region starts in alloc
}

// NewFabric returns a fabric with no regions, in Normal mode.
func NewFabric() *Fabric {
	return &Fabric{
		dct:      0x100000 | nextDCT.Add(1)&0x0fffff,
		regions:  map[uint32]*region{},
		nextRKey: 0x10c0_0001,
		stall:    DefaultStall,
	}
}

func (f *Fabric) Name() string   { return Name }
func (f *Fabric) Fabric() string { return Name }

// SetMode switches the behaviour until changed.
func (f *Fabric) SetMode(m Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.modeLeft = m, 0
}

// SetModeFor switches the behaviour for the next n uses (Register calls
// for FailRegistration, GETs with a token for the others), then back to
// Normal.
func (f *Fabric) SetModeFor(m Mode, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		f.mode, f.modeLeft = Normal, 0
		return
	}
	f.mode, f.modeLeft = m, n
}

// SetStall sets how long Stall holds a request.
func (f *Fabric) SetStall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stall = d
}

// takeLocked returns the mode for one use, a Register call or a GET with a
// token, and counts the use against a bounded mode. A mode that does not
// apply to the use reads as Normal and is not used up.
func (f *Fabric) takeLocked(registering bool) Mode {
	m := f.mode
	if (m == FailRegistration) != registering {
		return Normal
	}
	if f.modeLeft > 0 {
		if f.modeLeft--; f.modeLeft == 0 {
			f.mode = Normal
		}
	}
	return m
}

// Stats is a snapshot of the counters.
func (f *Fabric) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Regions = len(f.regions)
	return s
}

func (f *Fabric) count(fn func(*Stats)) {
	f.mu.Lock()
	fn(&f.stats)
	f.mu.Unlock()
}

// Register makes [off, off+n) of alloc a region and returns its
// registration.
func (f *Fabric) Register(alloc cufile.Allocation, off, n uint64) (mint.Registration, error) {
	if n == 0 || off > alloc.Size() || n > alloc.Size()-off {
		return nil, fmt.Errorf("%w: %d bytes at %d of a %d-byte allocation", mint.ErrOutOfBounds, n, off, alloc.Size())
	}
	if n > rdmatoken.MaxRegistration {
		return nil, fmt.Errorf("%w: a registration of %d bytes, at most %d", mint.ErrTooLarge, n, uint64(rdmatoken.MaxRegistration))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.takeLocked(true) == FailRegistration {
		f.stats.FailedRegistrations++
		return nil, fmt.Errorf("%w: loopback: registration refused (mode fail_registration)", mint.ErrRegistrationFailed)
	}
	r := &region{
		rkey:     f.nextRKey,
		base:     baseAddress + f.nextSlot*slotStride,
		size:     n,
		alloc:    alloc,
		allocOff: off,
	}
	f.nextRKey++
	f.nextSlot++
	f.regions[r.rkey] = r
	f.stats.Registrations++
	return &registration{f: f, r: r}, nil
}

// deregister drops a region; tokens naming it are refused from now on.
func (f *Fabric) deregister(rkey uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.regions[rkey]; !ok {
		return false
	}
	delete(f.regions, rkey)
	f.stats.Deregistrations++
	return true
}

// lookup finds the region a token names, and where in its allocation the
// token's address is.
func (f *Fabric) lookup(t rdmatoken.Token) (*region, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.regions[t.RKey]
	switch {
	case r == nil:
		return nil, 0, fmt.Errorf("rkey %08x names no registered region", t.RKey)
	case t.DCT != f.dct || !t.HasGID || t.GID != loopbackGID:
		return nil, 0, fmt.Errorf("the token names another NIC (DCT %06x)", t.DCT)
	case t.Addr < r.base || t.Addr-r.base > r.size || uint64(t.Size) > r.size-(t.Addr-r.base):
		return nil, 0, fmt.Errorf("%d bytes at %#x are outside the region of rkey %08x", t.Size, t.Addr, t.RKey)
	}
	return r, r.allocOff + (t.Addr - r.base), nil
}

// Close drops every region.
func (f *Fabric) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Deregistrations += int64(len(f.regions))
	clear(f.regions)
	return nil
}

// registration is one region, minting tokens that name parts of it.
type registration struct {
	f *Fabric
	r *region
}

func (g *registration) Token(off, n uint64) (string, error) {
	if n == 0 || off > g.r.size || n > g.r.size-off {
		return "", fmt.Errorf("%w: %d bytes at %d of a %d-byte region", mint.ErrOutOfBounds, n, off, g.r.size)
	}
	g.f.mu.Lock()
	_, live := g.f.regions[g.r.rkey]
	g.f.mu.Unlock()
	if !live {
		return "", fmt.Errorf("%w: loopback: region released", mint.ErrRegistrationFailed)
	}
	return rdmatoken.Token{
		Addr: g.r.base + off, Size: uint32(n), RKey: g.r.rkey,
		DCT: g.f.dct, HasGID: true, GID: loopbackGID,
	}.String(), nil
}

func (g *registration) ReportFailure(string) { g.f.count(func(s *Stats) { s.FailureReports++ }) }

func (g *registration) Release() error {
	g.f.deregister(g.r.rkey)
	return nil
}
