package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	s3fs "github.com/s3gdsfs/s3gdsfs/fs"
	"github.com/s3gdsfs/s3gdsfs/internal/setting"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// Config is everything a mount needs: one tree, each part the type of the
// package it is handed to (the S3 client's, the core's, the FUSE
// adapter's, the GPU engine's), declared there and nowhere else. Default
// holds every default and Validate every check; the packages below take
// their part as it is, a zero field being the value zero, not a default.
// A refused value is a *setting.Error naming the field by its path in
// this tree (GPU.Staging.Slots), which the command turns into its flag.
type Config struct {
	Mountpoint string
	// S3 is how the store is reached. Its ResponseTimeout is Read's
	// ReadTimeout and its RawReceiveBuffer follows FS.PollRequests: the
	// daemon sets both.
	S3 S3Config
	// Read bounds every GET of object bytes, POSIX and GPU reads alike;
	// its ReadTimeout also bounds the wait for a reply's headers.
	Read ReadConfig
	// Core is the filesystem core's: names, caching, prefetching. Its
	// ReadLimits are Read, which the daemon sets; its Splice and
	// SpliceAhead the daemon decides from Splice.
	Core vfs.Config
	// FS is the FUSE adapter's: owner, modes, polling for requests.
	FS  FSConfig
	GPU GPUConfig
	// Splice: "auto" splices whole-object streams to direct-I/O readers
	// where it can (streams on, an http endpoint, pipes that hold a
	// reply), "always" fails the mount where it cannot, "never".
	Splice string
	// ReadAhead is the kernel's readahead for the mount (0 leaves the
	// kernel's 128 KiB).
	ReadAhead int64
	Metrics   MetricsConfig
	// CheckTimeout bounds the start-up check of endpoint, bucket and
	// credentials; 0 is one dial and one wait for a reply's headers,
	// S3.ConnectTimeout + Read.ReadTimeout, which a failure names.
	CheckTimeout time.Duration
	Log          *slog.Logger
}

// S3Config is the S3 client's configuration (objstore.Config).
type S3Config = objstore.Config

// ReadConfig bounds every GET (objstore.ReadLimits).
type ReadConfig = objstore.ReadLimits

// FSConfig is the FUSE adapter's (fs.Options).
type FSConfig = s3fs.Options

// GPUConfig selects the CUDA layer behind GPU reads and holds the engine's
// own configuration (rdmaread.Config, whose ReadLimits are Config.Read).
type GPUConfig struct {
	// Mode is "auto" (the CUDA driver if it loads; GPU reads answer ENODEV
	// otherwise), "off", or "host-standin": host memory files under
	// StandinDir stand in for device memory. The stand-in is a test aid for
	// machines without a GPU and is never chosen by default.
	Mode       string
	StandinDir string
	// StandinAllowOther accepts the host stand-in on a mount every user may
	// use (FS.AllowOther): each of them may then have the daemon write
	// files of their own under StandinDir.
	StandinAllowOther bool
	// Prepare readies CUDA and each device's staging at start, in the
	// background, so that the first GPU read does not pay for them.
	Prepare bool
	// RDMA is "off", "loopback" (an in-process emulation of RDMA writes,
	// reported as fabric "loopback", for tests and the demo) or
	// "libs3rdma" (tokens minted by the library at RDMALibrary).
	RDMA           string
	RDMALibrary    string
	DeclineIsError bool
	rdmaread.Config
}

// MetricsConfig is the HTTP listener of /metrics.
type MetricsConfig struct {
	// Addr is where /metrics listens; "" turns the listener off.
	Addr string
	// Pprof also serves /debug/pprof on it: profiles and traces of the
	// daemon to anyone who can connect, so off unless asked for.
	Pprof bool
}

// DefaultMetricsAddr is loopback only: counters name buckets and keys.
const DefaultMetricsAddr = "127.0.0.1:9737"

// MaxFuseRead bounds FS.MaxRead: the replies of larger reads would need
// pipes beyond what a spliced reply should hold.
const MaxFuseRead = 16 << 20

// MaxPollRequests bounds what a mount may ask of FS.PollRequests: what a
// thread may spin for nothing. The command holds its flag to it; the daemon
// takes more (tests poll longer to catch every request).
const MaxPollRequests = 10 * time.Millisecond

// Default is a mount's configuration where nothing is set: every default,
// once. The mount point, the endpoint and the bucket are the caller's.
func Default() Config {
	c := Config{
		S3: S3Config{
			Region:         "us-east-1",
			ConnectTimeout: objstore.DefaultConnectTimeout,
		},
		Read: objstore.DefaultReadLimits(),
		Core: vfs.DefaultConfig(),
		FS: FSConfig{
			UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
			FileMode: 0o444, DirMode: 0o555,
			PollRequests: defaultPollRequests(),
			// One reader of large reads (64 MiB preads, a spliced
			// stream) went 1.46x faster with 4 MiB requests than 1 MiB
			// on 2 cores, and nothing measured went slower
			// (docs/benchmarks.md, "Defaults and why"). Where the
			// kernel or the user's rights do not allow it, what they do.
			MaxRead: 4 << 20,
		},
		GPU: GPUConfig{
			Mode:       "auto",
			StandinDir: hoststandin.DefaultDir,
			RDMA:       "off",
			Prepare:    true,
			Config:     rdmaread.DefaultConfig(),
		},
		Splice: "auto",
		// With 1 MiB of kernel readahead, a sequential reader through
		// the page cache sends one request at a time, which a
		// whole-object stream feeds; 4 MiB sent two at once, which
		// overtook the stream under load (docs/benchmarks.md, "Defaults
		// and why").
		ReadAhead: 1 << 20,
		Metrics:   MetricsConfig{Addr: DefaultMetricsAddr},
	}
	c.Core.Writes.Journal = DefaultUploadJournal()
	// Sixteen threads of 64 MiB preads of one file read 1.6-2.2x faster
	// with each thread's reads spliced from a GET of its own, on 2 cores
	// and on 16 (docs/benchmarks.md, "Defaults and why").
	c.Core.SpliceStreams = true
	return c
}

// DefaultUploadJournal is where a daemon records the multipart uploads it
// has open (vfs.WriteConfig.Journal): the user's state directory.
func DefaultUploadJournal() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "s3gdsfs", "uploads")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "s3gdsfs", "uploads")
	}
	if os.Geteuid() == 0 { // a system service without $HOME
		return "/var/lib/s3gdsfs/uploads"
	}
	return ""
}

// defaultPollRequests is how long a thread that has just replied polls for
// the next request (threads that have not, while another polls, a
// twentieth of it): it covers the gap between a reply and a streaming
// reader's next request, which on a virtual machine whose idle CPUs halt
// includes the reader's own wake-up and often outlasts a shorter poll, so
// a single reader read faster with 1 ms than with 50 us, and with either
// than without polling (docs/benchmarks.md, "Defaults and why").
// With fewer than 8 CPUs the polling threads take the cores the reader and
// a local server need, so none there. An idle mount sleeps 1 ms after its
// last request.
func defaultPollRequests() time.Duration {
	if runtime.NumCPU() >= 8 {
		return time.Millisecond
	}
	return 0
}

// Validate refuses a configuration a mount cannot run, naming the field
// by its path in the tree (*setting.Error). Start validates too.
func (c Config) Validate() error {
	s := c.S3
	switch {
	case c.Mountpoint == "":
		return setting.Refuse("Mountpoint", `""`, "a directory to mount on is needed")
	case s.Endpoint == "":
		return setting.Refuse("S3.Endpoint", `""`, "an endpoint URL is needed")
	case s.ConnectTimeout <= 0:
		return setting.Refuse("S3.ConnectTimeout", s.ConnectTimeout, "must be above 0")
	case c.CheckTimeout < 0:
		return setting.Refuse("CheckTimeout", c.CheckTimeout, "must be 0 (the connect and read timeouts) or more")
	}
	if err := c.Read.Validate(); err != nil {
		return setting.Within("Read", err)
	}
	core := c.Core
	core.ReadLimits = c.Read
	if err := core.Validate(); err != nil {
		return setting.Within("Core", err)
	}
	f := c.FS
	switch {
	case f.FileMode&^0o7777 != 0:
		return setting.Refuse("FS.FileMode", fmt.Sprintf("%#o", f.FileMode), "permission bits only")
	case f.DirMode&^0o7777 != 0:
		return setting.Refuse("FS.DirMode", fmt.Sprintf("%#o", f.DirMode), "permission bits only")
	case f.PollRequests < 0:
		return setting.Refuse("FS.PollRequests", f.PollRequests, "must be 0 (none) or more")
	case f.MaxRead < 128<<10 || f.MaxRead > MaxFuseRead || f.MaxRead%(4<<10) != 0:
		return setting.RefuseSize("FS.MaxRead", int64(f.MaxRead), "a multiple of 4KiB from 128KiB to %s", setting.Size(MaxFuseRead))
	case c.ReadAhead < 0:
		return setting.RefuseSize("ReadAhead", c.ReadAhead, "must be 0 (the kernel's) or more")
	}
	switch c.Splice {
	case "auto", "always", "never":
	default:
		return setting.Refuse("Splice", fmt.Sprintf("%q", c.Splice), "use auto, always or never")
	}
	g := c.GPU
	switch g.Mode {
	case "auto", "off", "host-standin":
	default:
		return setting.Refuse("GPU.Mode", fmt.Sprintf("%q", g.Mode), "use auto, off or host-standin")
	}
	if g.Mode == "host-standin" && c.FS.AllowOther && !g.StandinAllowOther {
		return setting.Refuse("GPU.StandinAllowOther", false,
			"the host stand-in on a mount every user may use (allow-other) lets each of them have the daemon write files of theirs under %s; set it to accept that", g.StandinDir)
	}
	switch g.RDMA {
	case "off":
	case "loopback", "libs3rdma":
		if g.Mode == "off" {
			return setting.Refuse("GPU.RDMA", g.RDMA, "needs GPU reads, which are off")
		}
	default:
		return setting.Refuse("GPU.RDMA", fmt.Sprintf("%q", g.RDMA), "use off, loopback or libs3rdma")
	}
	engine := g.Config
	engine.ReadLimits = c.Read
	if err := engine.Validate(); err != nil {
		return setting.Within("GPU", err)
	}
	return nil
}

// NearEndpoint reports whether every address of the endpoint is on this
// host or a private network, where whole-object streams serve readers
// (--stream=auto).
func NearEndpoint(endpoint string) bool { return objstore.NearEndpoint(endpoint) }

// s3Client is the S3 client's configuration. Spliced GETs are fed ahead
// on polling mounts (Start): their sockets get the larger buffer. GetRaw
// serves only spliced reads.
func (c Config) s3Client() objstore.Config {
	oc := c.S3
	oc.ResponseTimeout = c.Read.ReadTimeout
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
	return c.S3.ConnectTimeout + c.Read.ReadTimeout
}

// checkTimeoutFlags names what set the start-up check's bound.
func (c Config) checkTimeoutFlags() string {
	if c.CheckTimeout > 0 {
		return "the start-up check's bound"
	}
	return fmt.Sprintf("--connect-timeout %s + --read-timeout %s", c.S3.ConnectTimeout, c.Read.ReadTimeout)
}

// engine is the GPU engine's configuration.
func (c Config) engine() rdmaread.Config {
	e := c.GPU.Config
	e.ReadLimits = c.Read
	return e
}
