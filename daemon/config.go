package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	s3fs "github.com/s3gdsfs/s3gdsfs/fs"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// Config is everything a mount needs, in the daemon's own terms: the
// command and the tests set it without knowing the rooms it is handed to
// (the S3 client, the FUSE adapter, the GPU engine); only the core's
// settings are the core's own (vfs.Config).
type Config struct {
	Mountpoint string
	S3         S3Config
	Core       vfs.Config
	FS         FSConfig
	// Splice is --splice: "auto" (or "") splices whole-object streams to
	// direct-I/O readers where it can (streams on, an http endpoint, pipes
	// that hold a reply), "always" fails the mount where it cannot, "never".
	// It sets Core.Splice.
	Splice string
	// ReadAhead is the kernel's readahead for the mount (0 leaves the
	// kernel's 128 KiB).
	ReadAhead int64
	// MetricsAddr is where /metrics listens; "" turns it off.
	MetricsAddr string
	// CheckTimeout bounds the start-up check of endpoint, bucket and
	// credentials; 0 is one dial and one wait for a reply's headers,
	// S3.ConnectTimeout + S3.ResponseTimeout (--connect-timeout +
	// --read-timeout), which a failure names.
	CheckTimeout time.Duration
	GPU          GPUConfig
	// WrapStore, when set, decorates the S3 client (tests inject faults).
	WrapStore func(objstore.Store) objstore.Store
	Log       *slog.Logger
}

// S3Config is how the daemon reaches the store.
type S3Config struct {
	Endpoint string // URL: http(s)://host[:port]
	Region   string
	// CABundle is a PEM file of extra CAs trusted beside the system store.
	CABundle string
	// VirtualHost selects virtual-hosted addressing (bucket.host) instead
	// of path-style.
	VirtualHost bool
	// Credentials; nil means the standard chain (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, ~/.aws/credentials, instance metadata).
	Credentials *credentials.Credentials
	// ConnectTimeout bounds dialing; ResponseTimeout bounds waiting for a
	// reply's headers.
	ConnectTimeout  time.Duration
	ResponseTimeout time.Duration
}

// FSConfig is what the mount shows and how the kernel is served.
type FSConfig struct {
	UID, GID   uint32
	FileMode   uint32 // permission bits of files, e.g. 0444
	DirMode    uint32 // permission bits of directories, e.g. 0555
	AllowOther bool   // let users other than the mounting one in (docs/operations.md)
	FsName     string // shown in /proc/mounts
	Debug      bool   // log every FUSE request
	// DirectIO and DirectIOMinSize are --direct-io and
	// --direct-io-min-size: which opens bypass the page cache, the core's
	// choice at each open (they set Core.DirectIO and Core.DirectIOMinSize).
	DirectIO        vfs.DirectIO
	DirectIOMinSize int64
	// PollRequests is --fuse-poll: how long a thread that has just
	// replied polls /dev/fuse for the next request before it sleeps
	// (others a twentieth of it; 0: they sleep at once). A mount that
	// polls also splices a spliced reader's next reply ahead.
	PollRequests time.Duration
}

// GPUConfig selects the CUDA layer behind GPU reads and sizes the engine.
// A zero number is the engine's default (the Default constants below).
type GPUConfig struct {
	// Mode is "auto" (the CUDA driver if it loads; GPU reads answer ENODEV
	// otherwise), "off", or "host-standin": host memory files under
	// StandinDir stand in for device memory. The stand-in is a test aid for
	// machines without a GPU and is never chosen by default.
	Mode       string
	StandinDir string
	// RDMA is "off", "loopback" (an in-process emulation of RDMA writes,
	// reported as fabric "loopback", for tests and the demo) or
	// "libs3rdma" (tokens minted by the library at RDMALibrary).
	RDMA           string
	RDMALibrary    string
	DeclineIsError bool
	// Share turns on single flight: GPU reads over HTTP of the same object
	// version into the same device share their GETs while their ranges
	// overlap.
	Share bool
	// ClientGets reads GPU reads' GET bodies through the HTTP client even
	// where the endpoint is plain HTTP. Off (the default), they are read
	// on connections of their own, many bytes per wake-up
	// (rdmaread.Config.ClientGets).
	ClientGets bool

	// Streams is the most ranged GETs one GPU read runs at once;
	// TargetStreams the GETs in flight all GPU reads aim for together.
	Streams, TargetStreams int
	// MaxOps and MaxBytes bound the server operations of GPU reads in
	// flight, and their bytes, across all callers.
	MaxOps   int
	MaxBytes int64
	// PartSize, when set, is the largest range of one GET (0: parts sized
	// by load); RDMAChunk the largest single RDMA transfer.
	PartSize, RDMAChunk int64
	// ReadTimeout and Retries are those of the engine's GETs (Retries
	// below 0: none).
	ReadTimeout time.Duration
	Retries     int
	// SlotSize and Slots size each device's pinned staging ring;
	// PerCopier is how many slots of its own each GET cycles through (0:
	// none, one pool shared by every GET, the slot freed last taken
	// first); CopyStreams is how many device streams their copies go on.
	SlotSize, Slots, PerCopier, CopyStreams int
}

// The GPU engine's defaults, for the mount's option table.
const (
	DefaultGPUStreams       = rdmaread.DefaultStreams
	DefaultGPUTargetStreams = rdmaread.DefaultTargetStreams
	DefaultGPUMaxOps        = rdmaread.DefaultMaxOps
	DefaultGPUMaxBytes      = rdmaread.DefaultMaxBytes
	DefaultRDMAChunk        = rdmaread.DefaultRDMAChunk
	DefaultStagingSlotSize  = rdmaread.DefaultSlotSize
	DefaultStagingSlots     = rdmaread.DefaultSlots
	DefaultStagingPerCopier = rdmaread.DefaultPerCopier
	DefaultStagingStreams   = rdmaread.DefaultCopiers
)

// DefaultReadAhead: with 1 MiB of kernel readahead, a sequential reader's
// requests reach the daemon 1 MiB at a time, the largest reply FUSE
// carries; more readahead read no faster (docs/benchmarks.md, "Tried and
// not kept").
const DefaultReadAhead = 1 << 20

// DefaultMetricsAddr is loopback only: counters name buckets and keys.
const DefaultMetricsAddr = "127.0.0.1:9737"

// NearEndpoint reports whether every address of the endpoint is on this
// host or a private network, where whole-object streams serve readers
// (--stream=auto).
func NearEndpoint(endpoint string) bool { return objstore.NearEndpoint(endpoint) }

// s3Client is the S3 client's configuration. Spliced GETs are fed ahead
// on polling mounts (Start): their sockets get the larger buffer. GetRaw
// serves only spliced reads.
func (c Config) s3Client() objstore.Config {
	s := c.S3
	oc := objstore.Config{
		Endpoint:        s.Endpoint,
		Region:          s.Region,
		CABundle:        s.CABundle,
		VirtualHost:     s.VirtualHost,
		Credentials:     s.Credentials,
		ConnectTimeout:  s.ConnectTimeout,
		ResponseTimeout: s.ResponseTimeout,
	}
	if c.FS.PollRequests > 0 {
		oc.RawReceiveBuffer = spliceAheadReceiveBuffer
	}
	return oc
}

// checkTimeout is the start-up check's bound (CheckTimeout).
func (c Config) checkTimeout() time.Duration {
	if c.CheckTimeout > 0 {
		return c.CheckTimeout
	}
	connect, respond := c.S3.ConnectTimeout, c.S3.ResponseTimeout
	if connect <= 0 {
		connect = objstore.DefaultConnectTimeout
	}
	if respond <= 0 {
		respond = objstore.DefaultResponseTimeout
	}
	return connect + respond
}

// checkTimeoutFlags names what set the start-up check's bound.
func (c Config) checkTimeoutFlags() string {
	if c.CheckTimeout > 0 {
		return "the start-up check's bound"
	}
	return fmt.Sprintf("--connect-timeout %s + --read-timeout %s", c.checkTimeoutPart(c.S3.ConnectTimeout, objstore.DefaultConnectTimeout), c.checkTimeoutPart(c.S3.ResponseTimeout, objstore.DefaultResponseTimeout))
}

func (c Config) checkTimeoutPart(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// options are the FUSE adapter's.
func (c FSConfig) options() s3fs.Options {
	return s3fs.Options{
		UID: c.UID, GID: c.GID,
		FileMode: c.FileMode, DirMode: c.DirMode,
		AllowOther:   c.AllowOther,
		FsName:       c.FsName,
		Debug:        c.Debug,
		PollRequests: c.PollRequests,
	}
}

// engine is the GPU engine's configuration.
func (c GPUConfig) engine() rdmaread.Config {
	return rdmaread.Config{
		Streams:       c.Streams,
		TargetStreams: c.TargetStreams,
		MaxOps:        c.MaxOps,
		MaxBytes:      c.MaxBytes,
		PartSize:      c.PartSize,
		RDMAChunk:     c.RDMAChunk,
		ReadTimeout:   c.ReadTimeout,
		Retries:       c.Retries,
		Share:         c.Share,
		ClientGets:    c.ClientGets,
		Staging:       cufile.StagerConfig{SlotSize: c.SlotSize, Slots: c.Slots, PerCopier: c.PerCopier, Streams: c.CopyStreams},
	}
}
