// Package vfs is the filesystem's core, independent of FUSE: it maps buckets
// and keys to directories and files, caches what it learns, and serves each
// open file (Handle) through the readers its open chose, asked in order: a
// spliced GET for a direct-I/O reader (splice.go), then the shared blocks
// (blocks.go), fed ahead (prefetch.go) by a whole-object stream and ranged
// GETs (fetch.go). The fs package adapts it to go-fuse; tests and other
// front ends can drive it directly.
package vfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/internal/setting"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Config tunes the core. DefaultConfig holds its defaults; a zero field is
// the value zero (no cache, no retries, a stream never judged slow), not a
// default. Validate names a refused field by its name here.
type Config struct {
	// Bucket limits the mount to one bucket; empty shows every bucket the
	// credentials can list as a top-level directory.
	Bucket string
	// Prefix (within Bucket) becomes the mount's root; "" or ending in '/'.
	Prefix string

	MetaTTL     time.Duration // positive lookups and listings
	NegativeTTL time.Duration // names found not to exist
	MetaEntries int

	BlockSize     int   // unit of caching and of random reads
	PartSize      int64 // bytes per ranged GET of a sequential stream
	InitialWindow int64 // first prefetch window: small, so the first byte is quick
	MaxWindow     int64 // the window doubles up to this per handle
	MemoryLimit   int64 // all block memory: prefetch and cache
	CacheSize     int64 // of which the LRU cache may hold at most this; 0: none

	// ReadLimits bound each GET: ReadTimeout one that makes no progress,
	// Retries how many times a failed one is sent again (0: never). A mount
	// sets them from its one read setting, the GPU engine's too.
	objstore.ReadLimits

	// ClientGets reads the bodies of block downloads through the HTTP
	// client. Off (the default), they are read on connections of their
	// own where the store can hand one over (objstore.RawGetter: plain
	// HTTP, no proxy), many bytes per wake-up: less of the daemon's CPU per
	// byte, as for GPU reads (rdmaread.Config.ClientGets).
	ClientGets bool

	// NoStream (streams off, or a far endpoint) serves every
	// read with ranged GETs; otherwise a reader that starts at the beginning
	// of an object is fed by one GET of the whole object (fetch.go).
	NoStream bool
	// StreamMinRate (bytes per second) is the least a stream must deliver
	// while reading; a slower one hands over to parallel ranged GETs.
	// 0: a stream is never judged slow.
	StreamMinRate int64
	// StreamIdle closes a stream that has had nothing to read for this long.
	StreamIdle time.Duration
	// DirectIO says which opens bypass the kernel's page cache; the zero
	// value is DirectIOAuto with DirectIOMinSize.
	DirectIO DirectIO
	// DirectIOMinSize is the smallest object DirectIOAuto reads with
	// direct I/O.
	DirectIOMinSize int64
	// Splice feeds direct-I/O readers that start at the
	// beginning of an object from a GET's socket with splice(2), the bytes
	// never copied through the daemon (splice.go). Needs a store that is a
	// RawGetter and replies the FUSE layer splices.
	Splice bool
	// SpliceStreams, with Splice, also splices each stream of direct-I/O
	// reads elsewhere in an object (many threads' preads of one file) from
	// a ranged GET of its own (splice.go).
	SpliceStreams bool
	// Writes is the write side: off unless Writes.Allow (upload.go).
	Writes WriteConfig
	// SpliceAhead has a spliced feed move the next reply's bytes out of
	// the socket while this reply is written, into a second pipe on a
	// goroutine of its own, rather than when the next read comes: a
	// shorter chain per request where a CPU is free for it, a longer one
	// where the reader must wait for that CPU (splice.go).
	SpliceAhead bool
	// KernelReadAhead is the kernel's readahead for the mount: the page
	// cache's requests for a reader in order come up to two of its
	// windows ahead of the read the whole-object GET is at (splice.go).
	KernelReadAhead int64
}

// DefaultConfig is the core's configuration where a mount sets nothing,
// chosen for training datasets: objects are written once and read many
// times, so metadata may be cached for a minute; a missing name is
// re-checked sooner because datasets are often being uploaded while a job
// waits for them.
func DefaultConfig() Config {
	return Config{
		MetaTTL:       60 * time.Second,
		NegativeTTL:   5 * time.Second,
		MetaEntries:   1 << 20,
		BlockSize:     1 << 20,
		PartSize:      8 << 20,
		InitialWindow: 1 << 20,
		MaxWindow:     128 << 20,
		MemoryLimit:   2 << 30,
		CacheSize:     1 << 30,
		ReadLimits:    objstore.DefaultReadLimits(),
		// One connection to a store on the same host or network carries
		// more than this even on a loaded two-core machine, where the
		// machine and not the connection is the limit (docs/benchmarks.md,
		// "Defaults and why"); a stream slower than this has something wrong
		// with it, and parallel ranges spread the load.
		StreamMinRate: 64 << 20,
		StreamIdle:    5 * time.Second,
		// Where DirectIOAuto switches to direct I/O.
		DirectIOMinSize: 64 << 20,
		Writes:          DefaultWriteConfig(),
	}
}

// DirectIO is the page-cache policy of a mount. A read through the page
// cache costs one more copy of every byte (the daemon's reply lands in cache
// pages, then the reader copies it out) and in exchange keeps the data for
// later opens; direct I/O copies the reply straight into the reader's buffer.
type DirectIO int

const (
	// DirectIOAuto reads objects of at least DirectIOMinSize with direct
	// I/O (large shards, read once per epoch, where the copy is what
	// costs) and smaller ones through the page cache (where repeated
	// epochs are then free).
	DirectIOAuto DirectIO = iota
	// DirectIOAlways bypasses the page cache for every object.
	DirectIOAlways
	// DirectIONever reads every object through the page cache.
	DirectIONever
)

func (d DirectIO) String() string {
	switch d {
	case DirectIOAlways:
		return "always"
	case DirectIONever:
		return "never"
	}
	return "auto"
}

// Validate refuses a configuration the core cannot run, naming the field.
func (c Config) Validate() error {
	if err := c.ReadLimits.Validate(); err != nil {
		return err
	}
	bs := int64(c.BlockSize)
	switch {
	case c.MetaTTL < 0:
		return setting.Refuse("MetaTTL", c.MetaTTL, "must be 0 (names not cached) or more")
	case c.NegativeTTL < 0:
		return setting.Refuse("NegativeTTL", c.NegativeTTL, "must be 0 (missing names not cached) or more")
	case c.MetaEntries < 1:
		return setting.Refuse("MetaEntries", c.MetaEntries, "at least 1")
	case c.BlockSize < 4096:
		return setting.RefuseSize("BlockSize", bs, "at least 4096 bytes")
	case c.PartSize < bs || c.PartSize%bs != 0:
		return setting.RefuseSize("PartSize", c.PartSize, "a multiple of the block size (%s)", setting.Size(bs))
	case c.InitialWindow < bs:
		return setting.RefuseSize("InitialWindow", c.InitialWindow, "at least one block (%s)", setting.Size(bs))
	case c.MaxWindow < c.InitialWindow:
		return setting.RefuseSize("MaxWindow", c.MaxWindow, "at least the initial window (%s)", setting.Size(c.InitialWindow))
	case c.MemoryLimit < 4*c.PartSize:
		return setting.RefuseSize("MemoryLimit", c.MemoryLimit, "at least four parts (%s)", setting.Size(4*c.PartSize))
	case c.CacheSize < 0 || c.CacheSize > c.MemoryLimit:
		return setting.RefuseSize("CacheSize", c.CacheSize, "between 0 and the memory limit (%s): the cache is part of it", setting.Size(c.MemoryLimit))
	case c.StreamMinRate < 0:
		return setting.RefuseSize("StreamMinRate", c.StreamMinRate, "must be 0 (never judged slow) or more")
	case c.StreamIdle <= 0:
		return setting.Refuse("StreamIdle", c.StreamIdle, "must be above 0")
	case c.DirectIOMinSize <= 0:
		return setting.RefuseSize("DirectIOMinSize", c.DirectIOMinSize, "must be above 0 (DirectIOAlways reads every object with direct I/O)")
	case c.DirectIO < DirectIOAuto || c.DirectIO > DirectIONever:
		return setting.Refuse("DirectIO", int(c.DirectIO), "not a policy")
	case c.Prefix != "" && c.Bucket == "":
		return setting.Refuse("Prefix", c.Prefix, "a prefix needs a bucket")
	}
	if err := c.Writes.validate(c.BlockSize, c.MemoryLimit); err != nil {
		return setting.Within("Writes", err)
	}
	return nil
}

// normalize makes Prefix a directory's: "" or ending in '/'.
func (c *Config) normalize() {
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
}

// Entry is one name in the mount: a directory (a bucket, a common prefix or
// a marker object) or a file (an object).
type Entry struct {
	Name   string
	Dir    bool
	Bucket string // "" only for the top of a mount of every bucket
	// Key is the object's key for a file, the prefix (ending in '/', or ""
	// for a bucket's root) for a directory.
	Key     string
	Version objstore.Version // files only
}

// Path is the entry's place in the store, used as a cache key.
func (e Entry) Path() string { return e.Bucket + "/" + strings.TrimSuffix(e.Key, "/") }

// Ino is a stable inode number derived from the path and, for a file, the
// object's version, so the kernel sees the same number for the same name
// across lookups and remounts, and a new inode when the object changes: the
// kernel caches pages per inode, and an inode whose bytes could change
// would let a reader of one version find pages another version's reader
// left (both open at once). Without an ETag the version is the size and
// the modification time in seconds (a listing and a HEAD give it at
// different precisions).
func (e Entry) Ino() uint64 {
	h := fnv.New64a()
	h.Write([]byte(e.Bucket))
	h.Write([]byte{0})
	h.Write([]byte(e.Key))
	if e.Dir {
		h.Write([]byte{'/'})
	} else {
		h.Write([]byte{0})
		if e.Version.ETag != "" {
			h.Write([]byte(e.Version.ETag))
		} else {
			h.Write(binary.LittleEndian.AppendUint64(nil, uint64(e.Version.Size)))
			h.Write(binary.LittleEndian.AppendUint64(nil, uint64(e.Version.LastModified.Unix())))
		}
	}
	if n := h.Sum64(); n > 1 {
		return n
	}
	return 2 // 1 is the root's
}

// FS is the filesystem core.
type FS struct {
	store  objstore.Store
	cfg    Config
	log    *slog.Logger
	m      *metrics.Set
	meta   *cache.MetaCache[Entry]
	listed *listings // complete listings of directories
	loads  *dirLoads // background listings of directories looked up often
	blocks *cache.Store
	fetch  *fetcher

	readingHandles atomic.Int64 // open handles that have read: each one's share of block memory
	// largestRead is the largest direct-I/O read the kernel has sent: its
	// split of a larger one, which tells a stream's reads (splice.go).
	largestRead atomic.Int64

	// readers are the open handles of each object version (by object id)
	// and what they know of each other (handle.go's readState).
	readersMu sync.Mutex
	readers   map[string]*readState

	skippedMu sync.Mutex
	skipped   map[string]struct{} // keys already logged, bounded

	w *writeState // nil unless writes are allowed (write.go)
}

// New builds the core. It sends no request: Check does that.
func New(store objstore.Store, cfg Config, m *metrics.Set, log *slog.Logger) (*FS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.normalize()
	blocks, err := cache.NewStore(cache.StoreConfig{BlockSize: cfg.BlockSize, MemoryLimit: cfg.MemoryLimit, CacheLimit: cfg.CacheSize})
	if err != nil {
		return nil, err
	}
	f := &FS{
		store:   store,
		cfg:     cfg,
		log:     log,
		m:       m,
		meta:    cache.NewMetaCache[Entry](cfg.MetaTTL, cfg.NegativeTTL, cfg.MetaEntries),
		listed:  newListings(cfg.MetaTTL, min(cfg.MetaEntries, maxListedEntries)),
		loads:   newDirLoads(),
		blocks:  blocks,
		skipped: make(map[string]struct{}),
		readers: make(map[string]*readState),
	}
	f.fetch = newFetcher(f)
	m.MemoryLimit.Set(float64(cfg.MemoryLimit))
	return f, nil
}

// Logger is the core's logger, shared with the adapter.
func (f *FS) Logger() *slog.Logger { return f.log }

// Blocks exposes the block store for metrics and tests.
func (f *FS) Blocks() *cache.Store { return f.blocks }

// Config returns the configuration, its prefix normalized.
func (f *FS) Config() Config { return f.cfg }

// DirectIO reports whether an open of an object of size bytes bypasses the
// page cache (Config.DirectIO).
func (f *FS) DirectIO(size int64) bool {
	switch f.cfg.DirectIO {
	case DirectIOAlways:
		return true
	case DirectIONever:
		return false
	}
	return size >= f.cfg.DirectIOMinSize
}

// Check proves the configured bucket (or the bucket listing) is reachable
// with the credentials, so a bad mount fails at start with a clear message.
func (f *FS) Check(ctx context.Context) error {
	if f.cfg.Bucket == "" {
		_, err := f.store.ListBuckets(ctx)
		return err
	}
	return f.store.CheckBucket(ctx, f.cfg.Bucket)
}

// Root is the mount's top directory.
func (f *FS) Root() Entry {
	return Entry{Dir: true, Bucket: f.cfg.Bucket, Key: f.cfg.Prefix}
}

func (f *FS) isTop(dir Entry) bool { return dir.Bucket == "" }

// Lookup resolves name in dir without listing the whole prefix: from the
// metadata cache, or from dir's listing when it was listed whole within
// --meta-ttl, or else by a HEAD of the key and a one-key listing of key/
// run together; a directory whose lookups keep missing is listed whole in
// the background, and lookups wait for that listing while it is short
// (dirload.go). When both exist, the directory wins and the object is
// hidden (docs/architecture.md).
func (f *FS) Lookup(ctx context.Context, dir Entry, name string) (Entry, error) {
	if !dir.Dir {
		return Entry{}, fmt.Errorf("%s: %w", dir.Path(), ErrNotDir)
	}
	if nameProblem(name) != "" {
		return Entry{}, objstore.ErrNotFound
	}
	child := Entry{Name: name, Bucket: dir.Bucket, Key: dir.Key + name}
	if f.isTop(dir) {
		child = Entry{Name: name, Dir: true, Bucket: name}
	}
	cacheKey := child.Path()
	if e, ok := f.pending(cacheKey); ok { // being written, or made here (write.go)
		return e, nil
	}
	if e, exists, ok := f.meta.Lookup(cacheKey); ok {
		if !exists {
			f.m.MetaCacheHits.WithLabelValues("negative").Inc()
			return Entry{}, objstore.ErrNotFound
		}
		f.m.MetaCacheHits.WithLabelValues("positive").Inc()
		return e, nil
	}
	// A directory listed whole within --meta-ttl knows its names.
	if e, found, ok := f.listed.lookup(dir.Path(), name); ok {
		if !found {
			f.m.MetaCacheHits.WithLabelValues("negative").Inc()
			return Entry{}, objstore.ErrNotFound
		}
		f.m.MetaCacheHits.WithLabelValues("positive").Inc()
		f.meta.Put(cacheKey, e)
		return e, nil
	}
	// Lookups that keep missing in dir list it whole, in the background
	// (dirload.go); wait for that listing while it is short.
	run, load := f.missed(dir)
	if run != nil && run.wait(ctx) {
		if e, found, ok := f.listed.lookup(dir.Path(), name); ok {
			if !found {
				f.m.MetaCacheHits.WithLabelValues("negative").Inc()
				return Entry{}, objstore.ErrNotFound
			}
			f.m.MetaCacheHits.WithLabelValues("positive").Inc()
			f.meta.Put(cacheKey, e)
			return e, nil
		}
	}
	f.m.MetaCacheMisses.Inc()

	f.asking(load)
	defer f.asked(load)
	var e Entry
	var err error
	if f.isTop(dir) {
		e, err = child, f.store.CheckBucket(ctx, name)
		if errors.Is(err, objstore.ErrNoBucket) {
			err = objstore.ErrNotFound
		}
	} else {
		e, err = f.resolve(ctx, child)
	}
	switch {
	case err == nil:
		f.meta.Put(cacheKey, e)
	case errors.Is(err, objstore.ErrNotFound):
		f.meta.PutNegative(cacheKey)
	}
	return e, err
}

// resolve asks the store whether child is a directory, a file or nothing.
func (f *FS) resolve(ctx context.Context, child Entry) (Entry, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type statResult struct {
		obj objstore.Object
		err error
	}
	statc := make(chan statResult, 1)
	bucket, key := child.Bucket, child.Key // child changes below while Stat runs
	go func() {
		o, err := f.store.Stat(ctx, bucket, key)
		statc <- statResult{o, err}
	}()
	page, listErr := f.store.List(ctx, child.Bucket, child.Key+"/", "", 1)
	if listErr == nil && (len(page.Objects) > 0 || len(page.Prefixes) > 0) {
		child.Dir = true
		child.Key += "/"
		return child, nil
	}
	st := <-statc
	if st.err == nil {
		child.Version = st.obj.Version
		return child, nil
	}
	if listErr != nil && !errors.Is(listErr, objstore.ErrNotFound) {
		return Entry{}, listErr
	}
	return Entry{}, st.err
}

// Forget drops what the core has cached about the object at key, so that
// the next lookup of its name asks the store: after a read found it
// replaced (ESTALE).
func (f *FS) Forget(bucket, key string) {
	f.meta.Invalidate(Entry{Bucket: bucket, Key: key}.Path())
	parent := key[:strings.LastIndexByte(key, '/')+1]
	f.listed.drop(Entry{Bucket: bucket, Key: parent}.Path())
}

// ErrNotDir is returned for directory operations on a file (ENOTDIR).
var ErrNotDir = errno.New(syscall.ENOTDIR, "not a directory")

// maxRememberedSkips bounds the memory spent remembering logged keys; past
// it, skips are still counted but no longer logged.
const maxRememberedSkips = 100000

// noteSkipped counts a key that cannot be shown and logs it once.
func (f *FS) noteSkipped(bucket, key, reason string) {
	id := bucket + "/" + key
	f.skippedMu.Lock()
	_, seen := f.skipped[id]
	full := len(f.skipped) >= maxRememberedSkips
	if !seen && !full {
		f.skipped[id] = struct{}{}
	}
	f.skippedMu.Unlock()
	if seen {
		return
	}
	f.m.SkippedKeys.WithLabelValues(reason).Inc()
	if !full {
		f.log.Warn("key not shown in the mount", "bucket", bucket, "key", key, "reason", reason)
	}
}
