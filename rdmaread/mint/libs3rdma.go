package mint

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
	"golang.org/x/sys/unix"
)

// libs3rdma is MinIO's RDMA client library (minio/minio-cpp vendors it as
// vendor/s3rdma/lib/<arch>/libs3rdma.so.0). It is loaded at run time, so the
// daemon builds and runs without it. Its client C API (s3rdma.h):
//
//	S3RdmaClientHandle s3rdma_client_init(const char *device, char *err_buf, size_t err_buf_len);
//	void s3rdma_client_free(S3RdmaClientHandle h);
//	int  s3rdma_client_ready(S3RdmaClientHandle h);
//	int  s3rdma_client_nic_count(S3RdmaClientHandle h);
//	int  s3rdma_client_healthy_nic_count(S3RdmaClientHandle h);
//	int  s3rdma_client_report_token_failure(S3RdmaClientHandle h, const char *token);
//	int  s3rdma_client_register(S3RdmaClientHandle h, void *ptr, size_t size);
//	int  s3rdma_client_deregister(S3RdmaClientHandle h, void *ptr);
//	int  s3rdma_client_get_token(S3RdmaClientHandle h, void *ptr, size_t size, size_t offset, char **token_out);
//	void s3rdma_client_free_token(char *token);
//	int  s3rdma_client_memory_type(const void *ptr);
//
// Ownership: a token from get_token is the library's malloc'd string; the
// caller frees it with free_token. Registrations are keyed by address and
// reference counted: one deregister per register.

// Library names tried when no path is configured: the unversioned name of
// a development install, then the soname minio-cpp ships.
var libs3rdmaNames = []string{"libs3rdma.so", "libs3rdma.so.0"}

// Memory types s3rdma_client_memory_type reports.
const (
	S3RDMAMemSystem      = 0
	S3RDMAMemCUDAManaged = 1
	S3RDMAMemCUDADevice  = 2
	S3RDMAMemUnknown     = 3
)

// s3rdmaAPI holds the bound functions. The three marked optional are
// missing from older releases; without them failures are not reported and
// the NIC counts read -1.
type s3rdmaAPI struct {
	clientInit  func(device string, errBuf *byte, errLen uintptr) uintptr
	clientFree  func(h uintptr)
	clientReady func(h uintptr) int32
	register    func(h, ptr, size uintptr) int32
	deregister  func(h, ptr uintptr) int32
	getToken    func(h, ptr, size, offset uintptr, out **byte) int32
	freeToken   func(token *byte)
	memoryType  func(ptr uintptr) int32

	nicCount           func(h uintptr) int32             // optional
	healthyNICCount    func(h uintptr) int32             // optional
	reportTokenFailure func(h uintptr, tok string) int32 // optional
}

type s3rdmaSymbol struct {
	name     string
	fn       any
	optional bool
}

func (a *s3rdmaAPI) symbols() []s3rdmaSymbol {
	return []s3rdmaSymbol{
		{"s3rdma_client_init", &a.clientInit, false},
		{"s3rdma_client_free", &a.clientFree, false},
		{"s3rdma_client_ready", &a.clientReady, false},
		{"s3rdma_client_register", &a.register, false},
		{"s3rdma_client_deregister", &a.deregister, false},
		{"s3rdma_client_get_token", &a.getToken, false},
		{"s3rdma_client_free_token", &a.freeToken, false},
		{"s3rdma_client_memory_type", &a.memoryType, false},
		{"s3rdma_client_nic_count", &a.nicCount, true},
		{"s3rdma_client_healthy_nic_count", &a.healthyNICCount, true},
		{"s3rdma_client_report_token_failure", &a.reportTokenFailure, true},
	}
}

// LibS3RDMAConfig says which library and NICs to use.
type LibS3RDMAConfig struct {
	// Library is the path of libs3rdma; "" searches the library path for
	// libs3rdma.so, then libs3rdma.so.0.
	Library string
	// Devices names the RDMA devices ("mlx5_0" or "mlx5_0,mlx5_1"); ""
	// lets the library take $S3RDMA_DEVICE, else every device with an
	// ACTIVE port.
	Devices string
}

// LibS3RDMA mints tokens with libs3rdma. It implements Minter.
type LibS3RDMA struct {
	api     *s3rdmaAPI
	devices string

	mu     sync.RWMutex // calls hold it shared; Close exclusive
	h      uintptr
	closed bool
	pinned map[uintptr]*pin // what we registered, by address
}

// pin mirrors the library's count of registrations of one address.
type pin struct {
	size uint64
	refs int
}

// OpenLibS3RDMA loads the library and opens a client on the configured
// NICs. Errors wrap ErrNoMinter: the host cannot mint tokens.
func OpenLibS3RDMA(cfg LibS3RDMAConfig) (*LibS3RDMA, error) {
	names := libs3rdmaNames
	if cfg.Library != "" {
		names = []string{cfg.Library}
	}
	api, lib, err := loadS3RDMA(names)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoMinter, err)
	}
	var errBuf [512]byte
	h := api.clientInit(cfg.Devices, &errBuf[0], uintptr(len(errBuf)))
	if h == 0 {
		return nil, fmt.Errorf("%w: %s: s3rdma_client_init(%q): %s", ErrNoMinter, lib, cfg.Devices, unix.ByteSliceToString(errBuf[:]))
	}
	if api.clientReady(h) != 1 {
		api.clientFree(h)
		return nil, fmt.Errorf("%w: %s: the client is not ready", ErrNoMinter, lib)
	}
	return &LibS3RDMA{api: api, devices: cfg.Devices, h: h, pinned: map[uintptr]*pin{}}, nil
}

// goString copies a NUL-terminated C string of at most max bytes.
func goString(p *byte, max int) (string, bool) {
	for n := 0; n < max; n++ {
		if *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) == 0 {
			return string(unsafe.Slice(p, n)), true
		}
	}
	return "", false
}

func (l *LibS3RDMA) Name() string { return "libs3rdma" }

// Fabric is "rdma", with the devices when they were named.
func (l *LibS3RDMA) Fabric() string {
	if l.devices != "" {
		return "rdma:" + l.devices
	}
	return "rdma"
}

var errMinterClosed = errors.New("libs3rdma: client closed")

// NICs is how many rails the client mints on and how many are healthy now;
// -1 each when the library does not say.
func (l *LibS3RDMA) NICs() (total, healthy int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed || l.api.nicCount == nil || l.api.healthyNICCount == nil {
		return -1, -1
	}
	return int(l.api.nicCount(l.h)), int(l.api.healthyNICCount(l.h))
}

// MemoryType is what the library takes alloc's memory for (S3RDMAMem*);
// without libcuda it reports S3RDMAMemSystem for every pointer.
func (l *LibS3RDMA) MemoryType(alloc cufile.Allocation) int {
	dp, ok := alloc.(cufile.DevicePointer)
	if !ok || dp.DevicePtr() == 0 {
		return S3RDMAMemUnknown
	}
	return int(l.api.memoryType(uintptr(dp.DevicePtr())))
}

// Register pins [off, off+n) of alloc on every rail.
func (l *LibS3RDMA) Register(alloc cufile.Allocation, off, n uint64) (Registration, error) {
	if n == 0 || off > alloc.Size() || n > alloc.Size()-off {
		return nil, fmt.Errorf("%w: %d bytes at %d of a %d-byte allocation", ErrOutOfBounds, n, off, alloc.Size())
	}
	if n > rdmatoken.MaxRegistration {
		return nil, fmt.Errorf("%w: a registration of %d bytes, at most %d", ErrTooLarge, n, rdmatoken.MaxRegistration)
	}
	dp, ok := alloc.(cufile.DevicePointer)
	if !ok {
		return nil, fmt.Errorf("%w: %T has no device pointer", ErrRegistrationFailed, alloc)
	}
	base := dp.DevicePtr()
	if base == 0 {
		return nil, fmt.Errorf("%w: the allocation is closed", ErrRegistrationFailed)
	}
	ptr := uintptr(base + off)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("%w: %v", ErrRegistrationFailed, errMinterClosed)
	}
	// The library counts registrations per address and keeps the first
	// size: a second size at the same address would mint tokens for
	// memory that is not pinned.
	p := l.pinned[ptr]
	if p != nil && p.size != n {
		return nil, fmt.Errorf("%w: %#x is registered with %d bytes, not %d", ErrRegistrationFailed, ptr, p.size, n)
	}
	if l.api.register(l.h, ptr, uintptr(n)) != 0 {
		return nil, fmt.Errorf("%w: s3rdma_client_register(%#x, %d) failed", ErrRegistrationFailed, ptr, n)
	}
	if p == nil {
		p = &pin{size: n}
		l.pinned[ptr] = p
	}
	p.refs++
	return &s3rdmaRegistration{l: l, ptr: ptr, n: n}, nil
}

// Close frees the client. Registrations still held are deregistered first.
func (l *LibS3RDMA) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for ptr, p := range l.pinned {
		for range p.refs {
			if l.api.deregister(l.h, ptr) != 0 {
				errs = append(errs, fmt.Errorf("libs3rdma: deregister %#x failed", ptr))
			}
		}
	}
	clear(l.pinned)
	l.api.clientFree(l.h)
	return errors.Join(errs...)
}

type s3rdmaRegistration struct {
	l   *LibS3RDMA
	ptr uintptr
	n   uint64

	mu   sync.Mutex
	gone bool
}

// Token mints a token, copies it into Go memory and frees the library's.
func (r *s3rdmaRegistration) Token(off, n uint64) (string, error) {
	if n == 0 || off > r.n || n > r.n-off {
		return "", fmt.Errorf("%w: %d bytes at %d of a %d-byte registration", ErrOutOfBounds, n, off, r.n)
	}
	r.l.mu.RLock()
	defer r.l.mu.RUnlock()
	if r.l.closed {
		return "", fmt.Errorf("%w: %v", ErrRegistrationFailed, errMinterClosed)
	}
	if r.isGone() {
		return "", fmt.Errorf("%w: registration released", ErrRegistrationFailed)
	}
	var out *byte
	if rc := r.l.api.getToken(r.l.h, r.ptr, uintptr(n), uintptr(off), &out); rc != 0 || out == nil {
		if out != nil {
			r.l.api.freeToken(out)
		}
		return "", fmt.Errorf("%w: s3rdma_client_get_token(%#x, %d, %d) failed", ErrRegistrationFailed, r.ptr, n, off)
	}
	s, ok := goString(out, 256)
	r.l.api.freeToken(out)
	if !ok {
		return "", fmt.Errorf("%w: libs3rdma minted a token without a NUL in 256 bytes", ErrRegistrationFailed)
	}
	// Never send what the server would refuse.
	tok, err := rdmatoken.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w: libs3rdma minted %q: %w", ErrRegistrationFailed, s, err)
	}
	if uint64(tok.Size) < n {
		return "", fmt.Errorf("%w: libs3rdma minted a token for %d bytes, asked %d", ErrRegistrationFailed, tok.Size, n)
	}
	return s, nil
}

func (r *s3rdmaRegistration) isGone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone
}

// ReportFailure moves the library off the rail the token named.
func (r *s3rdmaRegistration) ReportFailure(token string) {
	r.l.mu.RLock()
	defer r.l.mu.RUnlock()
	if r.l.closed || r.l.api.reportTokenFailure == nil {
		return
	}
	r.l.api.reportTokenFailure(r.l.h, token)
}

// Release deregisters the address; a second Release does nothing.
func (r *s3rdmaRegistration) Release() error {
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		return nil
	}
	r.gone = true
	r.mu.Unlock()
	l := r.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil // Close deregistered it
	}
	p := l.pinned[r.ptr]
	if p == nil {
		return nil
	}
	if p.refs--; p.refs == 0 {
		delete(l.pinned, r.ptr)
	}
	if l.api.deregister(l.h, r.ptr) != 0 {
		return fmt.Errorf("libs3rdma: s3rdma_client_deregister(%#x) failed", r.ptr)
	}
	return nil
}
