// Package rdmaread is the GPU read engine: it takes a request to place a
// range of an object into a caller's device buffer and carries it, over
// RDMA where a fabric serves it, otherwise over HTTP into pinned staging
// slots that are copied to the device while the next ones fill; an open
// file's reads in order are read ahead into slots it holds (ahead.go). Every
// result says how its bytes travelled and, for a declined RDMA transfer, why.
package rdmaread

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/setting"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/sched"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// Config tunes the engine. DefaultConfig holds its defaults; Validate
// names a refused field by its name here.
type Config struct {
	// Streams is the most ranged GETs one read runs at once.
	Streams int
	// TargetStreams is how many GETs the engine aims to have in flight
	// across all reads: a read takes its share (TargetStreams over the
	// reads in flight, between one and Streams), so a lone read is cut
	// into parallel ranges while busy readers send one GET each, which a
	// server answers more cheaply than ranges of the same object.
	TargetStreams int
	// MaxOps bounds server operations (ranged GETs, RDMA transfers) in
	// flight across all GPU reads; MaxBytes bounds their bytes. A GET
	// counts the pinned slot it fills, not its length: its bytes wait in
	// the server's socket, not in memory of ours.
	MaxOps   int
	MaxBytes int64
	// PartSize, when set, is the largest range of one HTTP GET of a GPU
	// read; parts are streamed through slots, so they may exceed a slot.
	PartSize int64
	// RDMAChunk is the largest RDMA transfer. A read is cut into transfers
	// as into HTTP parts (its share of TargetStreams), none larger than
	// this: a busy reader's whole object is one transfer, which a server
	// answers more cheaply than ranges of it.
	RDMAChunk int64
	// Staging sizes each device's pinned ring; a chunk of a request is one slot.
	Staging cufile.StagerConfig
	// ReadLimits bound each GET (a mount sets them from its one read
	// setting, the core's too).
	objstore.ReadLimits
	// Share turns single flight on: GPU reads over HTTP of the same
	// object version into the same device share the GETs of a fetch in
	// flight (flight.go). Off, every read sends GETs of its own.
	Share bool
	// ClientGets reads every GET's body through the HTTP client. Off (the
	// default), bodies are read on connections of their own where the
	// store can hand one over (objstore.RawGetter: plain HTTP, no proxy),
	// waiting for many bytes at a time instead of each packet: less CPU
	// per byte for the reader and the server ("GPU: GET bodies on
	// connections of their own" in docs/benchmarks.md).
	ClientGets bool
	// ReadAhead is the largest window by which one open file's GPU reads
	// in order are read ahead into staging (ahead.go); 0 turns reading
	// ahead off. Every device's readahead holds at most half its ring.
	ReadAhead int64
}

// DefaultConfig is the engine's configuration where a mount sets nothing
// (docs/benchmarks.md, "Defaults and why"). Slots are a few MiB, in
// one pool per device that every GET takes from, the slot freed last
// first, so the bytes a GET reads land in memory the CPU and the copy
// engine touched last, still in the CPU's cache; the ring holds enough for
// every operation in flight to have one filling and others copying.
func DefaultConfig() Config {
	return Config{
		Streams:       8,
		TargetStreams: 8,
		MaxOps:        64,
		MaxBytes:      16 << 30,
		RDMAChunk:     rdmatoken.MaxServerOp,
		Staging:       cufile.StagerConfig{SlotSize: 4 << 20, Slots: 256, Streams: 8},
		ReadLimits:    objstore.DefaultReadLimits(),
		ReadAhead:     DefaultReadAhead,
	}
}

// Validate refuses a configuration the engine cannot run, naming the field.
func (c Config) Validate() error {
	if err := c.ReadLimits.Validate(); err != nil {
		return err
	}
	for _, n := range []struct {
		name  string
		value int
	}{{"Streams", c.Streams}, {"TargetStreams", c.TargetStreams}, {"MaxOps", c.MaxOps}} {
		if n.value < 1 {
			return setting.Refuse(n.name, n.value, "at least 1")
		}
	}
	switch {
	case c.MaxBytes <= 0:
		return setting.RefuseSize("MaxBytes", c.MaxBytes, "must be above 0")
	case c.PartSize != 0 && c.PartSize < 1<<20:
		return setting.RefuseSize("PartSize", c.PartSize, "0 (parts sized by load) or at least 1MiB")
	case c.RDMAChunk < 1<<20 || c.RDMAChunk > rdmatoken.MaxServerOp:
		return setting.RefuseSize("RDMAChunk", c.RDMAChunk, "between 1MiB and %s", setting.Size(rdmatoken.MaxServerOp))
	case c.Staging.SlotSize < 64<<10 || c.Staging.SlotSize > 1<<30:
		return setting.RefuseSize("Staging.SlotSize", int64(c.Staging.SlotSize), "between 64KiB and 1GiB")
	case c.ReadAhead != 0 && c.ReadAhead < 1<<20:
		return setting.RefuseSize("ReadAhead", c.ReadAhead, "0 (off) or at least 1MiB")
	case c.Staging.Streams > 64:
		return setting.Refuse("Staging.Streams", c.Staging.Streams, "from 1 to 64")
	}
	return setting.Within("Staging", c.Staging.Validate())
}

// Request is one GPU read.
type Request struct {
	Bucket, Key string
	Version     objstore.Version // pinned at open
	Offset      int64
	Length      int64
	Device      int
	Handle      cufile.Handle // CUDA IPC handle of the allocation's base
	DstOffset   uint64        // where in the allocation the bytes go
	Flags       abi.Flags
	Owner       int    // the caller's process, which holds the import
	UID         uint32 // the caller's user: the host stand-in writes only its files
	Token       string // a token the caller minted, sent as is
	// Ahead is the readahead state of the open file read through, or nil
	// (no readahead).
	Ahead *Ahead
}

// Result says what a read delivered and how.
type Result struct {
	Bytes     int64
	RDMABytes int64
	HTTPBytes int64
	Transport abi.Transport
	Decline   abi.Decline
	Elapsed   time.Duration
	// CopyWait is time spent blocked on device copies: waiting for a free
	// pinned slot and for the final synchronisation.
	CopyWait time.Duration
	// SharedBytes is how many of HTTPBytes came from a fetch another read
	// led (single flight): copied from the slots its GET filled, or device
	// to device from a destination they had landed in.
	SharedBytes int64
}

// ErrNoRDMA: RDMA was required and there is none. The callers' layer maps
// it and the engine's other errors to errnos (docs/ioctl.md); a destination
// range outside the allocation is mint.ErrOutOfBounds.
var ErrNoRDMA = errors.New("RDMA required and this daemon has no RDMA transport (RDMA is off)")

// Engine carries GPU reads. One engine serves every caller of the daemon.
type Engine struct {
	store   objstore.Store
	backend cufile.Backend
	imports *cufile.ImportCache
	m       *metrics.Set
	log     *slog.Logger
	cfg     Config
	sched   *sched.Scheduler

	rdma *rdmaPath // nil when RDMA is off

	mu      sync.Mutex
	stagers map[int]cufile.Stager

	reading atomic.Int64 // reads in flight, for sizing parts by load

	flights flightTable // HTTP fetches under way that reads may share

	aheadDevs map[int]*aheadDevice // each device's share of its ring for readahead, under mu
	aheadM    aheadMetrics
	aheadGets sync.WaitGroup // readahead fetches under way

	// gets sends every GET: parts, flights, RDMA transfers and their
	// HTTP fallbacks. raw asks for bodies on connections of their own
	// (unless ClientGets), where the store can hand them over.
	gets *objstore.Getter
	raw  bool
}

// New builds an engine over a CUDA backend (or the host stand-in).
func New(store objstore.Store, backend cufile.Backend, cfg Config, m *metrics.Set, log *slog.Logger) *Engine {
	e := &Engine{
		store:   store,
		backend: backend,
		imports: cufile.NewImportCache(backend),
		m:       m,
		log:     log,
		cfg:     cfg,
		sched:   sched.New(cfg.MaxOps, cfg.MaxBytes),
		stagers: make(map[int]cufile.Stager),

		aheadDevs: make(map[int]*aheadDevice),
	}
	e.aheadM = newAheadMetrics(m.Registry, e.aheadSlots)
	e.gets = &objstore.Getter{Store: store, ReadTimeout: cfg.ReadTimeout, Retries: cfg.Retries,
		OnRetry: m.ReadRetries.Inc, Log: log}
	e.raw = !cfg.ClientGets
	if g, ok := store.(objstore.RDMAGetter); ok {
		// Tokens callers mint themselves go out as they are, RDMA or not.
		e.rdma = &rdmaPath{getter: g}
	}
	e.sched.OnWait(func(d time.Duration) { m.GPUSchedWait.Observe(d.Seconds()) })
	m.ReportImportsOpen(func() float64 { return float64(e.imports.OpenImports()) })
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "s3gdsfs_gpu_ops_in_flight", Help: "Server operations of GPU reads admitted by the scheduler.",
		}, func() float64 { o, _, _ := e.sched.InFlight(); return float64(o) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "s3gdsfs_gpu_ops_waiting", Help: "Server operations of GPU reads waiting for their turn.",
		}, func() float64 { _, _, w := e.sched.InFlight(); return float64(w) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "s3gdsfs_gpu_staging_slots_busy", Help: "Pinned staging slots out of the ring, by state: held (being filled) or copying.",
			ConstLabels: prometheus.Labels{"state": "held"},
		}, func() float64 { h, _ := e.stagingBusy(); return float64(h) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "s3gdsfs_gpu_staging_slots_busy", Help: "Pinned staging slots out of the ring, by state: held (being filled) or copying.",
			ConstLabels: prometheus.Labels{"state": "copying"},
		}, func() float64 { _, c := e.stagingBusy(); return float64(c) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "s3gdsfs_gpu_staging_pinned_bytes", Help: "Host memory pinned for staging slots, every GPU's ring together; each ring is pinned whole at start (Prepare) or grows as GETs need slots.",
		}, func() float64 { return float64(e.stagingPinned()) }),
	)
	return e
}

// Backend is the CUDA layer the engine writes through.
func (e *Engine) Backend() cufile.Backend { return e.backend }

// Imports is the engine's import cache; the fs layer releases a caller's
// imports when its files close.
func (e *Engine) Imports() *cufile.ImportCache { return e.imports }

// Stager is the device's staging ring, shared with the loopback fabric.
func (e *Engine) Stager(device int) (cufile.Stager, error) { return e.stager(device) }

// stagingBusy sums the slots out of every device's ring.
func (e *Engine) stagingBusy() (held, copying int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range e.stagers {
		h, c := st.Busy()
		held, copying = held+h, copying+c
	}
	return held, copying
}

// stagingPinned sums the memory every device's ring has pinned.
func (e *Engine) stagingPinned() (pinned int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range e.stagers {
		pinned += st.Pinned()
	}
	return pinned
}

// stager returns the device's staging ring, creating it on first use.
func (e *Engine) stager(device int) (cufile.Stager, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.stagers[device]; ok {
		return s, nil
	}
	s, err := e.backend.NewStager(device, e.cfg.Staging)
	if err != nil {
		return nil, err
	}
	e.stagers[device] = s
	return s, nil
}

// Prepare readies every device the backend sees for GPU reads before the
// first one comes: CUDA's start (its context on each device) and each
// device's whole staging ring, which a first read would otherwise wait for
// (pinned under its GETs, a chunk at a time). It stops at the first error,
// which it returns (a host without a driver: cufile.ErrNoDriver); a later
// read meets the same error on its own, and a ring left part pinned grows
// as reads need it.
func (e *Engine) Prepare(ctx context.Context) error {
	devices, err := e.backend.Devices()
	if err != nil {
		return err
	}
	stagers := make([]cufile.Stager, 0, len(devices))
	for _, d := range devices {
		if err := ctx.Err(); err != nil {
			return err
		}
		s, err := e.stager(d.Ordinal)
		if err != nil {
			return fmt.Errorf("device %d: %w", d.Ordinal, err)
		}
		stagers = append(stagers, s)
	}
	// Every device's CUDA first, then the rings: a read of any device
	// finds its context ready while the rings are pinned.
	for i, s := range stagers {
		if err := s.Fill(ctx); err != nil {
			return fmt.Errorf("device %d: %w", devices[i].Ordinal, err)
		}
	}
	return nil
}

// Read places the request's range into the caller's buffer. A range past
// the end of the object is short; a zero length reads nothing.
func (e *Engine) Read(ctx context.Context, r Request) (Result, error) {
	start := time.Now()
	if r.Offset < 0 || r.Length < 0 {
		return Result{}, fmt.Errorf("%w: negative offset or length", abi.ErrInvalid)
	}
	rdma := e.wantsRDMA(r)
	if r.Flags&abi.FlagRDMAOnly != 0 && !rdma {
		// RDMA was required and there is none: a decline that may not fall back.
		e.m.GPUDeclined.WithLabelValues(abi.DeclineRDMAUnavailable.String()).Inc()
		return Result{Decline: abi.DeclineRDMAUnavailable}, ErrNoRDMA
	}
	if rdma && r.Token != "" && r.Handle == (cufile.Handle{}) {
		return e.readCallerToken(ctx, r, start)
	}
	alloc, err := e.imports.AcquireAs(r.Owner, r.UID, r.Device, r.Handle)
	if err != nil {
		return Result{}, err
	}
	defer e.imports.Put(alloc)
	// The whole requested range must fit, whatever the object's size: a
	// caller's buffer is checked before a byte is written.
	if r.DstOffset > alloc.Size() || uint64(r.Length) > alloc.Size()-r.DstOffset {
		return Result{}, fmt.Errorf("%w: %d bytes at offset %d of a %d-byte allocation", mint.ErrOutOfBounds, r.Length, r.DstOffset, alloc.Size())
	}
	n := min(r.Length, max(r.Version.Size-r.Offset, 0))
	if n == 0 {
		return Result{Elapsed: time.Since(start)}, nil
	}
	e.reading.Add(1)
	defer e.reading.Add(-1)
	var res Result
	switch {
	case rdma:
		res, err = e.readRDMA(ctx, r, n, alloc)
	case r.Ahead != nil && e.cfg.ReadAhead > 0:
		res, err = e.readAhead(ctx, r, n, alloc)
	default:
		res, err = e.readHTTP(ctx, r, n, alloc)
	}
	res.Elapsed = time.Since(start)
	if err != nil {
		return res, err
	}
	e.account(res)
	return res, nil
}

// readCallerToken serves a read that names no buffer, only a token the
// caller minted: the server writes over RDMA or the call reports the
// decline and the caller falls back itself.
func (e *Engine) readCallerToken(ctx context.Context, r Request, start time.Time) (Result, error) {
	n := min(r.Length, max(r.Version.Size-r.Offset, 0))
	if n == 0 {
		return Result{Elapsed: time.Since(start)}, nil
	}
	if n > rdmatoken.MaxServerOp {
		return Result{}, fmt.Errorf("%w: a caller-minted token covers at most %d bytes per call", abi.ErrInvalid, int64(rdmatoken.MaxServerOp))
	}
	pr := e.rdmaPart(ctx, r, rdmatoken.Part{Off: r.Offset, Len: n}, nil, r.DstOffset)
	if pr.err != nil {
		return Result{}, pr.err
	}
	res := Result{Bytes: pr.rdma, RDMABytes: pr.rdma, Decline: pr.decline, Elapsed: time.Since(start)}
	if pr.rdma > 0 {
		res.Transport = abi.TransportRDMA
	}
	e.account(res)
	return res, nil
}

// account counts a finished read by transport.
func (e *Engine) account(res Result) {
	if res.RDMABytes > 0 {
		e.m.GPUReadBytes.WithLabelValues("rdma").Add(float64(res.RDMABytes))
	}
	if res.HTTPBytes > 0 {
		e.m.GPUReadBytes.WithLabelValues("http").Add(float64(res.HTTPBytes))
	}
	if res.SharedBytes > 0 {
		e.m.GPUSharedBytes.Add(float64(res.SharedBytes))
	}
	if res.Transport != abi.TransportNone {
		t := res.Transport.String()
		e.m.GPUReads.WithLabelValues(t).Inc()
		e.m.GPUReadSeconds.WithLabelValues(t).Observe(res.Elapsed.Seconds())
	}
	e.m.GPUCopyWait.Add(res.CopyWait.Seconds())
}

// readHTTP fetches the range in parts with parallel ranged GETs (as few as
// the load allows: partSize), each streamed slot by slot into the pinned
// ring. Each GET's goroutine enqueues its own slots' device copies on a
// copier of its own, so that a filled slot goes to the device without a
// hand-over and comes back to the same goroutine, still in the CPU's cache.
// One GET per part rather than per slot keeps the server's per-request cost
// off the byte rate.
func (e *Engine) readHTTP(ctx context.Context, r Request, n int64, alloc cufile.Allocation) (Result, error) {
	stager, err := e.stager(r.Device)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	part := e.partSize(n, e.reading.Load())
	parts := (n + part - 1) / part
	workers := min(int64(e.cfg.Streams), parts)
	var next, copied, waited, shared atomic.Int64
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	e.m.GPUBytesInFlight.Add(float64(n))
	defer e.m.GPUBytesInFlight.Sub(float64(n))
	share := e.cfg.Share
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if share {
				// Flights run the GETs and copies; the reader waits for
				// its destinations.
				for {
					i := next.Add(1) - 1
					if i >= parts || ctx.Err() != nil {
						return
					}
					off := i * part
					size := min(part, n-off)
					s, err := e.flightPart(ctx, r, alloc, stager, r.Offset+off, size, r.DstOffset+uint64(off))
					shared.Add(s)
					if err != nil {
						fail(err)
						return
					}
					copied.Add(size)
				}
			}
			copier, err := stager.NewCopier()
			if err != nil {
				fail(err)
				return
			}
			defer func() {
				// Close synchronises the stream: the bytes are visible once
				// it returns. Its wait is in WaitNanos.
				if err := copier.Close(); err != nil {
					fail(err)
				}
				waited.Add(copier.WaitNanos())
			}()
			for {
				i := next.Add(1) - 1
				if i >= parts || ctx.Err() != nil {
					return
				}
				off := i * part
				size := min(part, n-off)
				// The caller's turn first, then slots: a read waiting for
				// its turn holds no pinned memory.
				done, err := e.sched.Acquire(ctx, r.Owner, min(size, int64(e.cfg.Staging.SlotSize)))
				if err == nil {
					err = e.streamPart(ctx, r, copier, alloc, r.Offset+off, size, r.DstOffset+uint64(off), &copied)
					done()
				}
				if err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	wait := time.Duration(waited.Load())
	// A worker that finds the request cancelled stops without a word, so
	// bytes may be missing with no error recorded: success only when every
	// byte was copied.
	if firstErr == nil && copied.Load() != n {
		firstErr = ctx.Err()
		if firstErr == nil {
			firstErr = fmt.Errorf("rdmaread: %d of %d bytes carried", copied.Load(), n)
		}
	}
	if firstErr != nil {
		return Result{CopyWait: wait}, firstErr
	}
	return Result{Bytes: n, HTTPBytes: n, Transport: abi.TransportHTTP, CopyWait: wait, SharedBytes: shared.Load()}, nil
}

// partSize is the range of one GET of a read of n bytes while reading
// reads are in flight: the read's share of TargetStreams, at most Streams
// parts, none under minPart, none over PartSize when that is set.
func (e *Engine) partSize(n, reading int64) int64 {
	k := min(max(int64(e.cfg.TargetStreams)/max(reading, 1), 1), int64(e.cfg.Streams))
	k = min(k, max(n/minPart, 1))
	const align = 1 << 20
	part := (n + k - 1) / k
	part = (part + align - 1) / align * align
	if e.cfg.PartSize > 0 {
		part = min(part, e.cfg.PartSize)
	}
	return max(part, 1)
}

// minPart is the smallest part worth a GET of its own.
const minPart = 8 << 20

// streamPart reads [off, off+size) with one ranged GET into successive
// slots, enqueuing each slot's copy to dst as it fills; after a transient
// failure the Getter asks again from the first byte not yet in a slot.
func (e *Engine) streamPart(ctx context.Context, r Request, copier cufile.Copier, alloc cufile.Allocation, off, size int64, dst uint64, copied *atomic.Int64) error {
	rng := objstore.Range{Bucket: r.Bucket, Key: r.Key, Off: off, N: size, Version: r.Version}
	return e.gets.Fetch(ctx, rng, e.raw, nil, func(body *objstore.Body, pos int64) (int64, error) {
		moved, err := e.fillSlots(ctx, copier, alloc, dst+uint64(pos-off), body.Left(), body.ReadFull)
		copied.Add(moved)
		return moved, err
	})
}

// fillSlots reads n bytes with read, a slot at a time, and enqueues each
// slot's copy to dst; it returns how many bytes were enqueued. A slot whose
// read failed goes back to the ring.
func (e *Engine) fillSlots(ctx context.Context, copier cufile.Copier, alloc cufile.Allocation, dst uint64, n int64, read func(p []byte) error) (int64, error) {
	var moved int64
	for moved < n {
		slot, err := e.acquireSlot(ctx, copier, alloc.Device())
		if err != nil {
			return moved, err
		}
		k := min(int64(len(slot.Buf)), n-moved)
		if err := read(slot.Buf[:k]); err != nil {
			copier.ReleaseSlot(slot) // these bytes are asked for again
			return moved, err
		}
		e.m.GPUFetchedBytes.Add(float64(k))
		if err := copier.CopyAsync(slot, int(k), alloc, dst+uint64(moved)); err != nil {
			return moved, err
		}
		moved += k
	}
	return moved, nil
}

// acquireSlot takes a staging slot of device's ring for a GET's next
// bytes. Readahead gives its slots back before a read waits for one. A
// wait longer than the read timeout counts as the GET's stall: its
// connection has sat unread that long, and the rest of the range is asked
// for again.
func (e *Engine) acquireSlot(ctx context.Context, copier cufile.Copier, device int) (*cufile.Slot, error) {
	if e.aheadDev(device).holding() {
		if st, err := e.stager(device); err == nil {
			if slot := st.TryAcquireSlot(); slot != nil {
				return slot, nil
			}
		}
		e.pressure(device)
	}
	wctx, cancel := context.WithTimeout(ctx, e.cfg.ReadTimeout)
	defer cancel()
	slot, err := copier.AcquireSlot(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("no staging slot free for %s: %w", e.cfg.ReadTimeout, err)
	}
	return slot, err
}

// ReleaseOwner closes a caller's imports (its files are all closed).
func (e *Engine) ReleaseOwner(owner int) {
	if err := e.imports.ReleaseOwner(owner); err != nil {
		e.log.Warn("closing a caller's imports", "pid", owner, "err", err)
	}
}

// Reap closes the imports of callers whose process has exited; the daemon
// runs it periodically so a killed reader's buffers are not held.
func (e *Engine) Reap() {
	n, err := e.imports.Reap(cufile.ProcessAlive)
	if err != nil {
		e.log.Warn("closing imports of exited callers", "err", err)
	}
	if n > 0 {
		e.log.Debug("closed imports of exited callers", "callers", n)
	}
}

// Close waits for copies and frees staging memory.
func (e *Engine) Close() error {
	e.dropAllAhead()
	e.imports.Close()
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, s := range e.stagers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
