// Package daemon wires the rooms together: the S3 client, the core, the
// FUSE mount and the metrics endpoint. The command, the demo and the
// integration tests all start a mount through it.
package daemon

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/cuda"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	s3fs "github.com/s3gdsfs/s3gdsfs/fs"
	"github.com/s3gdsfs/s3gdsfs/internal/setting"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// Daemon is a running mount.
type Daemon struct {
	cfg     Config
	Core    *vfs.FS
	Metrics *metrics.Set
	GPU     *rdmaread.Engine // nil when GPU reads are off
	fabric  *loopback.Server // the loopback fabric's endpoint, when used
	server  *fuse.Server
	http    *http.Server
	addr    string
	stop    context.CancelFunc
	closing sync.Once
	s3      *objstore.Minio // the client it built (none when handed a store), whose kept connections go at shutdown
	// failures logs the S3 requests that fail once the mount is up.
	failures *failureLog

	unmountMu sync.Mutex
	unmounted bool // Unmount succeeded (or detached): later calls do nothing
}

// spliceAheadReceiveBuffer is the socket buffer of a spliced GET that is
// fed ahead: four 1 MiB replies, so that the server is never held back
// while a reply is written.
const spliceAheadReceiveBuffer = 4 << 20

// A Part is a collaborator handed to Start in place of the one it would
// build from the Config. The command hands none; tests decorate the store
// or drive the loopback fabric, and the demo has the fabric decline a read.
type Part func(*parts)

type parts struct {
	store  objstore.Store
	fabric *loopback.Fabric
}

// WithStore has the mount read from store instead of the S3 client it
// builds from the Config (NewStore): a decorator of that client, which
// injects faults, counts calls or slows them. The daemon meters store as
// it meters its own client, and takes it for one that hands over raw GET
// bodies or RDMA replies only where store itself is one.
func WithStore(store objstore.Store) Part { return func(p *parts) { p.store = store } }

// WithFabric has a mount of GPU.RDMA "loopback" use f instead of a fabric
// of its own, so that whoever holds f can switch its modes (declines,
// stalls) and read its counts.
func WithFabric(f *loopback.Fabric) Part { return func(p *parts) { p.fabric = f } }

// NewStore is the S3 client a mount of cfg reads through, as Start builds
// it where WithStore hands it none.
func NewStore(cfg Config) (*objstore.Minio, error) { return objstore.NewMinio(cfg.s3Client()) }

// Start checks the endpoint, mounts, and serves metrics. Every failure is
// reported in words a user can act on.
func Start(cfg Config, with ...Part) (*Daemon, error) {
	var given parts
	for _, part := range with {
		part(&given)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if given.fabric != nil && cfg.GPU.RDMA != "loopback" {
		return nil, setting.Refuse("GPU.RDMA", cfg.GPU.RDMA, "a loopback fabric was handed in, which only RDMA loopback uses")
	}
	// One read setting for every GET.
	cfg.Core.ReadLimits = cfg.Read
	if err := checkMountpoint(cfg.Mountpoint, cfg.Log); err != nil {
		return nil, err
	}
	d := &Daemon{}
	base := given.store
	if base == nil {
		raw, err := NewStore(cfg)
		if err != nil {
			return nil, err
		}
		d.s3, base = raw, raw
	}
	var core *vfs.FS
	d.Metrics = metrics.New(
		func() float64 { return float64(core.Blocks().Budget().Used()) },
		func() float64 { return float64(core.Blocks().Stats().CachedBytes) },
	)
	d.failures = newFailureLog(cfg.Log)
	store := metered(logFailures(base, d.failures), d.Metrics)
	maxRead, raisedFrom, cut := fuseMaxRead(cfg.FS.MaxRead)
	switch {
	case raisedFrom != "":
		cfg.Log.Info("raised fs.fuse.max_pages_limit so that FUSE reads reach --fuse-max-read", "was_pages", raisedFrom, "max_read", maxRead)
	case cut != "":
		cfg.Log.Info("FUSE reads smaller than --fuse-max-read", "max_read", maxRead, "why", cut)
	}
	cfg.FS.MaxRead = maxRead
	spliceOn, spliceWhyNot, err := resolveSplice(cfg, base)
	if err != nil {
		return nil, err
	}
	cfg.Core.Splice = spliceOn
	cfg.Core.SpliceStreams = cfg.Core.SpliceStreams && spliceOn
	// A mount that polls for requests has CPUs to spare (--fuse-poll is 0
	// below 8 CPUs by default), and splicing the next reply beside this
	// one needs a CPU beside the reader's: on 2 cores it gained nothing
	// and filling ahead made a single reader slower, on 16 it took the
	// splice out of each request's chain (docs/benchmarks.md, "Defaults and why").
	cfg.Core.SpliceAhead = cfg.Core.Splice && cfg.FS.PollRequests > 0
	cfg.Core.KernelReadAhead = cfg.ReadAhead
	if cfg.ReadAhead == 0 {
		cfg.Core.KernelReadAhead = kernelReadAhead
	}
	d.cfg = cfg
	core, err = vfs.New(store, cfg.Core, d.Metrics, cfg.Log)
	if err != nil {
		return nil, err
	}
	d.Core = core
	if err := enableWrites(cfg, core, base, d.Metrics); err != nil {
		return nil, err
	}

	timeout := cfg.checkTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err = core.Check(ctx)
	cancel()
	if err != nil {
		core.CloseWrites()
		return nil, explainCheck(err, cfg)
	}
	abortLeftUploads(cfg, core, timeout)
	d.failures.armed.Store(true)

	if d.GPU, err = newGPU(cfg, store, d.Metrics); err != nil {
		return nil, err
	}
	if d.GPU != nil {
		if d.fabric, err = enableRDMA(cfg, d.GPU, given.fabric, d.Metrics); err != nil {
			d.shutdown() // the engine's staging memory
			return nil, err
		}
	}
	if cfg.Metrics.Addr != "" {
		if err := d.serveMetrics(cfg.Metrics); err != nil {
			d.shutdown() // the engine and the fabric's server
			return nil, err
		}
	}
	var bg context.Context
	bg, d.stop = context.WithCancel(context.Background())
	d.server, err = s3fs.Mount(bg, cfg.Mountpoint, core, d.GPU, d.Metrics, cfg.FS)
	if err == nil {
		server := d.server
		d.Metrics.ReportFuseRequests(func() metrics.FuseRequestWaits {
			w := server.RequestWaits()
			return metrics.FuseRequestWaits{Polled: w.Polled, Slept: w.Slept, Blocked: w.Blocked,
				InterruptsFound: w.InterruptsFound, InterruptsRequeued: w.InterruptsRequeued,
				WokenBesidePollers: w.WokenBesidePollers}
		})
		err = d.server.WaitMount()
	}
	if err != nil {
		d.shutdown()
		return nil, fmt.Errorf("mount %s: %w", cfg.Mountpoint, err)
	}
	if d.GPU != nil && cfg.GPU.Prepare {
		// In the background: the mount serves POSIX reads meanwhile, and a
		// GPU read that comes first waits only for what it needs.
		go func(engine *rdmaread.Engine) {
			start := time.Now()
			if err := engine.Prepare(bg); err != nil {
				level := slog.LevelInfo
				if errors.Is(err, cufile.ErrNoDriver) {
					level = slog.LevelDebug // said at start
				}
				cfg.Log.Log(bg, level, "GPU reads not prepared ahead", "reason", err)
				return
			}
			cfg.Log.Info("GPU reads prepared", "seconds", time.Since(start).Seconds())
		}(d.GPU)
	}
	if cfg.ReadAhead > 0 {
		if err := setReadAhead(cfg.Mountpoint, cfg.ReadAhead); err != nil {
			cfg.Log.Info("kernel readahead left at its default", "err", err)
		}
	}
	cfg.Log.Info("mounted", "mountpoint", cfg.Mountpoint, "endpoint", cfg.S3.Endpoint,
		"bucket", cfg.Core.Bucket, "prefix", cfg.Core.Prefix, "metrics", d.addr,
		"whole_object_streams", !cfg.Core.NoStream, "fuse_poll", cfg.FS.PollRequests,
		"splice", cfg.Core.Splice, "splice_ahead", cfg.Core.SpliceAhead, "splice_streams", cfg.Core.SpliceStreams,
		"writes", cfg.Core.Writes.Allow, "overwrite", cfg.Core.Writes.AllowOverwrite)
	if spliceWhyNot != "" && cfg.Splice != "never" {
		cfg.Log.Info("replies not spliced", "why", spliceWhyNot)
	}
	return d, nil
}

// enableWrites gives the core the store's write side where writes are
// allowed: the store must be an objstore.Uploader (the S3 client is).
func enableWrites(cfg Config, core *vfs.FS, store objstore.Store, m *metrics.Set) error {
	if !cfg.Core.Writes.Allow {
		return nil
	}
	up, ok := store.(objstore.Uploader)
	if !ok {
		return setting.Refuse("Core.Writes.Allow", true, "the store (%T) cannot write", store)
	}
	if err := core.EnableWrites(objstore.MeteredUploader{Inner: up, M: m}); err != nil {
		return setting.Refuse("Core.Writes.Journal", cfg.Core.Writes.Journal, "%v", err)
	}
	return nil
}

// abortLeftUploads aborts the multipart uploads a killed daemon left
// (vfs.FS.AbortLeftUploads); what it cannot abort now it logs, and a later
// start tries again.
func abortLeftUploads(cfg Config, core *vfs.FS, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := core.AbortLeftUploads(ctx)
	if n > 0 {
		cfg.Log.Info("aborted multipart uploads a stopped daemon left", "uploads", n, "journal", cfg.Core.Writes.Journal)
	}
	if err != nil {
		cfg.Log.Warn("multipart uploads a stopped daemon left could not all be aborted; the next start tries again", "err", err)
	}
}

// resolveSplice decides Splice for a mount of store: whether, and if not
// why not. "always" where splicing cannot work is an error naming the
// setting.
func resolveSplice(cfg Config, store objstore.Store) (on bool, whyNot string, err error) {
	mode := cfg.Splice
	if mode == "never" {
		return false, "--splice=never", nil
	}
	_, raw := store.(objstore.RawGetter)
	switch {
	case cfg.Core.NoStream:
		whyNot = "whole-object streams are off (--stream)"
	case !strings.HasPrefix(cfg.S3.Endpoint, "http://"):
		whyNot = "the endpoint is not plain http (TLS bytes must be decrypted by the daemon)"
	case !raw:
		// A store handed in (WithStore) that hands no GET over as its socket.
		whyNot = fmt.Sprintf("the store (%T) cannot hand over GET bodies as sockets", store)
	default:
		if err := s3fs.SpliceUsable(cfg.FS.MaxRead); err != nil {
			whyNot = err.Error()
		}
	}
	if whyNot == "" {
		return true, "", nil
	}
	if mode == "always" {
		return false, "", setting.Refuse("Splice", mode, "%s", whyNot)
	}
	return false, whyNot, nil
}

// MetricsAddr is the address /metrics listens on ("" when off).
func (d *Daemon) MetricsAddr() string { return d.addr }

// Wait blocks until the mount goes away (Unmount, or fusermount3 -u).
func (d *Daemon) Wait() {
	d.server.Wait()
	d.shutdown()
}

// shutdown stops background work and frees staging memory, once.
func (d *Daemon) shutdown() { d.closing.Do(d.release) }

func (d *Daemon) release() {
	if d.stop != nil {
		d.stop()
	}
	d.closeHTTP()
	if d.Core != nil {
		d.Core.CloseWrites()
	}
	if d.fabric != nil {
		d.fabric.Close()
	}
	if d.GPU != nil {
		if err := d.GPU.Close(); err != nil {
			d.cfg.Log.Warn("closing the GPU engine", "err", err)
		}
	}
	if d.s3 != nil {
		d.s3.CloseIdleConnections()
	}
}

// enableRDMA sets up the RDMA path the configuration asks for; loopback
// uses f where one was handed in (WithFabric).
func enableRDMA(cfg Config, engine *rdmaread.Engine, f *loopback.Fabric, m *metrics.Set) (*loopback.Server, error) {
	rc := rdmaread.RDMAConfig{DeclineIsError: cfg.GPU.DeclineIsError}
	var fabric *loopback.Server
	switch cfg.GPU.RDMA {
	case "off":
		return nil, nil
	case "loopback":
		if f == nil {
			f = loopback.NewFabric()
		}
		srv, err := loopback.NewServer(f, cfg.S3.Endpoint, loopback.StagerFunc(engine.Stager))
		if err != nil {
			return nil, err
		}
		url, err := srv.Listen()
		if err != nil {
			return nil, err
		}
		// Only RDMA GETs go to the fabric's endpoint; everything else goes
		// to the store directly.
		s3 := cfg.s3Client()
		s3.Endpoint = url
		raw, err := objstore.NewMinio(s3)
		if err != nil {
			srv.Close()
			return nil, err
		}
		rc.Minter, rc.Getter, fabric = f, objstore.Metered{Inner: raw, M: m}, srv
		cfg.Log.Warn("RDMA is the loopback fabric: an in-process emulation of RDMA writes, not a network transport")
	case "libs3rdma":
		minter, err := mint.OpenLibS3RDMA(mint.LibS3RDMAConfig{Library: cfg.GPU.RDMALibrary})
		if err != nil {
			return nil, setting.Refuse("GPU.RDMA", cfg.GPU.RDMA, "%v", err)
		}
		rc.Minter = minter
	}
	if err := engine.EnableRDMA(rc); err != nil {
		if fabric != nil {
			fabric.Close()
		}
		return nil, err
	}
	return fabric, nil
}

// metered counts store's requests in m. Metered forwards raw GETs and RDMA
// GETs whatever its inner store is, failing at the call where that cannot
// take them; the read paths choose theirs by what the store is, so the
// metered store is a RawGetter or an RDMAGetter only where store is.
func metered(store objstore.Store, m *metrics.Set) objstore.Store {
	ms := objstore.Metered{Inner: store, M: m}
	_, raw := store.(objstore.RawGetter)
	_, rdma := store.(objstore.RDMAGetter)
	switch {
	case raw && rdma:
		return ms
	case raw:
		return struct {
			objstore.Store
			objstore.RawGetter
		}{ms, ms}
	case rdma:
		return struct {
			objstore.Store
			objstore.RDMAGetter
		}{ms, ms}
	}
	return struct{ objstore.Store }{ms}
}

// newGPU picks the CUDA layer. Without a driver the engine still exists, so
// GPU reads get a clear ENODEV and the caps attribute says why.
func newGPU(cfg Config, store objstore.Store, m *metrics.Set) (*rdmaread.Engine, error) {
	var backend cufile.Backend
	var err error
	switch cfg.GPU.Mode {
	case "off":
		return nil, nil
	case "host-standin":
		backend, err = hoststandin.New(cfg.GPU.StandinDir)
		if err != nil {
			return nil, setting.Refuse("GPU.Mode", cfg.GPU.Mode, "%v", err)
		}
		cfg.Log.Warn("GPU reads go to host memory files (host stand-in, a test aid): no device memory is used", "dir", cfg.GPU.StandinDir)
	case "auto":
		backend, err = cuda.New()
		switch {
		case errors.Is(err, cufile.ErrNoDriver):
			// A host without a GPU, the common case: one quiet line, the
			// loader's words for those who ask for them.
			cfg.Log.Info("no CUDA driver (libcuda.so.1) on this host: GPU reads answer ENODEV; POSIX reads are unaffected")
			cfg.Log.Debug("loading the CUDA driver", "err", err)
		case err != nil:
			cfg.Log.Info("GPU reads unavailable: GPU read ioctls will answer ENODEV", "reason", err)
		}
		if backend == nil {
			return nil, nil
		}
	}
	return rdmaread.New(store, backend, cfg.engine(), m, cfg.Log), nil
}

// Unmount detaches the mount, retrying while it is busy and finally
// detaching lazily so a shutdown never hangs on an open file. Once it has
// succeeded, later calls do nothing.
func (d *Daemon) Unmount() error {
	d.unmountMu.Lock()
	defer d.unmountMu.Unlock()
	if d.unmounted {
		return nil
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = d.server.Unmount(); err == nil {
			d.unmounted = true
			d.shutdown()
			return nil
		}
		// Busy while files are open, the common case: whoever unmounts
		// says what it waits for (the command, once).
		d.cfg.Log.Debug("unmount failed, retrying", "mountpoint", d.cfg.Mountpoint, "err", strings.TrimSpace(err.Error()))
		time.Sleep(200 * time.Millisecond)
	}
	if lerr := syscall.Unmount(d.cfg.Mountpoint, syscall.MNT_DETACH); lerr == nil {
		d.cfg.Log.Debug("mount busy: detached lazily", "mountpoint", d.cfg.Mountpoint, "open_files", d.OpenFiles())
		d.unmounted = true
		d.shutdown()
		return nil
	}
	return fmt.Errorf("unmount %s: %w", d.cfg.Mountpoint, err)
}

// Detach unmounts lazily at once: the mountpoint is free, and files still
// open on the mount fail (ENOTCONN) once this process exits. It is the
// second signal's way out of a shutdown that waits for open files.
func (d *Daemon) Detach() error {
	err := syscall.Unmount(d.cfg.Mountpoint, syscall.MNT_DETACH)
	if err != nil && err != syscall.EINVAL { // EINVAL: not mounted (already detached)
		if out, ferr := exec.Command("fusermount3", "-uz", d.cfg.Mountpoint).CombinedOutput(); ferr != nil {
			return fmt.Errorf("detach %s: %v; fusermount3: %s", d.cfg.Mountpoint, err, strings.TrimSpace(string(out)))
		}
	}
	d.shutdown()
	return nil
}

// OpenFiles is the number of file handles open on the mount.
func (d *Daemon) OpenFiles() int {
	var m dto.Metric
	if d.Metrics.OpenHandles.Write(&m) != nil || m.Gauge == nil {
		return 0
	}
	return int(m.Gauge.GetValue())
}

func (d *Daemon) serveMetrics(mc MetricsConfig) error {
	ln, err := net.Listen("tcp", mc.Addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return setting.Refuse("Metrics.Addr", mc.Addr, "%v: is another mount serving its metrics there? give this mount --metrics-addr HOST:PORT of its own (port 0: any free one), or --metrics-addr off", err)
	}
	if err != nil {
		return setting.Refuse("Metrics.Addr", mc.Addr, "%v", err)
	}
	d.addr = ln.Addr().String()
	d.http = &http.Server{Handler: metricsMux(d.Metrics, mc.Pprof), ReadHeaderTimeout: 10 * time.Second}
	go d.http.Serve(ln)
	return nil
}

// metricsMux serves /metrics and, only when asked for, /debug/pprof:
// profiles and traces show what the daemon is doing to anyone who can
// connect, loopback included, so they are off unless the mount asks.
func metricsMux(m *metrics.Set, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func (d *Daemon) closeHTTP() {
	if d.http != nil {
		d.http.Close()
	}
}

// explainCheck turns the start-up check's failure into advice.
func explainCheck(err error, cfg Config) error {
	ep := cfg.S3.Endpoint
	switch {
	case errors.Is(err, objstore.ErrNoBucket) && cfg.Core.Bucket != "":
		return fmt.Errorf("bucket %q does not exist at %s (--bucket)", cfg.Core.Bucket, ep)
	case errors.Is(err, objstore.ErrNoBucket):
		// No bucket was named: S3 does not answer the bucket listing so.
		return fmt.Errorf("endpoint %s (--endpoint) answered the bucket listing with NoSuchBucket: is it the S3 API's address? %v", ep, err)
	case errors.Is(err, objstore.ErrAccessDenied):
		return explainDenied(err, cfg)
	case strings.Contains(err.Error(), "x509:") || strings.Contains(err.Error(), "tls:"):
		return explainTLS(err, cfg)
	case errors.Is(err, objstore.ErrNotS3):
		return fmt.Errorf("endpoint %s (--endpoint) did not answer as S3 (is it the S3 API's address, not a web console's or a proxy's?): %v", ep, err)
	}
	var nerr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout() && !strings.Contains(err.Error(), "dial")) {
		return fmt.Errorf("endpoint %s did not answer the start-up check within %s (%s): %v", ep, cfg.checkTimeout(), cfg.checkTimeoutFlags(), err)
	}
	var oerr *net.OpError
	if errors.As(err, &oerr) || errors.As(err, &nerr) || strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("cannot reach endpoint %s (--endpoint): %v", ep, err)
	}
	return fmt.Errorf("start-up check against %s failed: %v", ep, err)
}

// explainDenied says which keys were refused, from where they came or
// which sources were tried when there were none, and what to change.
func explainDenied(err error, cfg Config) error {
	ep := cfg.S3.Endpoint
	src := credentialSource(cfg)
	if !src.found {
		return fmt.Errorf("access denied by %s: no credentials were found, so the requests went unsigned; tried %s: "+
			"set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give --credentials-file: %v", ep, src.tried, err)
	}
	keys := fmt.Sprintf("access key ID %q (from %s)", src.keyID, src.from)
	msg := err.Error()
	switch {
	case strings.Contains(msg, "InvalidAccessKeyId") || strings.Contains(msg, "XAdminUserNotFound"):
		return fmt.Errorf("endpoint %s does not know the %s: check the key, and that --endpoint is the store it belongs to: %v", ep, keys, err)
	case strings.Contains(msg, "SignatureDoesNotMatch"):
		return fmt.Errorf("endpoint %s refused the signature of the %s: the secret key does not match the key ID, or --region (%s) is not the endpoint's: %v",
			ep, keys, cfg.S3.Region, err)
	case strings.Contains(msg, "ExpiredToken") || strings.Contains(msg, "InvalidToken") || strings.Contains(msg, "TokenRefreshRequired"):
		return fmt.Errorf("endpoint %s refused the session token of the %s: temporary keys expire; get new ones (AWS_SESSION_TOKEN): %v", ep, keys, err)
	case cfg.Core.Bucket == "":
		return fmt.Errorf("access denied by %s: the %s may not list the buckets; name the one to mount with --bucket: %v", ep, keys, err)
	}
	return fmt.Errorf("access denied by %s: the %s may not list bucket %q: check the key's permissions and the bucket policy: %v", ep, keys, cfg.Core.Bucket, err)
}

// credentials says where a mount's keys came from, or which sources the
// standard chain (objstore.DefaultCredentials) tried without finding any.
type keySource struct {
	found       bool
	keyID, from string
	tried       string
}

// credentialSource asks the chain's sources again, in its order: the
// environment, the shared files, then IAM, which can take a few seconds
// away from AWS (the instance metadata service does not answer).
func credentialSource(cfg Config) keySource {
	if cfg.S3.Credentials != nil {
		v, err := cfg.S3.Credentials.Get()
		if err == nil && v.AccessKeyID != "" {
			return keySource{found: true, keyID: v.AccessKeyID, from: "the keys the mount was given (--credentials-file)"}
		}
		return keySource{tried: "the keys the mount was given (--credentials-file)"}
	}
	if v, _ := (&credentials.EnvAWS{}).Retrieve(); v.AccessKeyID != "" {
		return keySource{found: true, keyID: v.AccessKeyID, from: "the environment, AWS_ACCESS_KEY_ID"}
	}
	file := os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	if file == "" {
		file = "~/.aws/credentials"
		if home, err := os.UserHomeDir(); err == nil {
			file = home + "/.aws/credentials"
		}
	}
	profile := os.Getenv("AWS_PROFILE")
	if profile == "" {
		profile = "default"
	}
	if v, _ := (&credentials.FileAWSCredentials{}).Retrieve(); v.AccessKeyID != "" {
		return keySource{found: true, keyID: v.AccessKeyID, from: fmt.Sprintf("%s, profile %s", file, profile)}
	}
	if v, _ := (&credentials.IAM{Client: &http.Client{Timeout: 3 * time.Second}}).Retrieve(); v.AccessKeyID != "" {
		return keySource{found: true, keyID: v.AccessKeyID, from: "IAM (web identity, container credentials or the instance metadata service)"}
	}
	return keySource{tried: fmt.Sprintf("the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), %s (profile %s), "+
		"and IAM (AWS_WEB_IDENTITY_TOKEN_FILE, container credentials, the instance metadata service)", file, profile)}
}

// explainTLS says why a TLS handshake with the endpoint failed and what to
// change: a private CA is one cause of several.
func explainTLS(err error, cfg Config) error {
	ep := cfg.S3.Endpoint
	var host *x509.HostnameError
	var unknown x509.UnknownAuthorityError
	switch {
	case errors.As(err, &host) || strings.Contains(err.Error(), "x509: certificate is valid for") ||
		strings.Contains(err.Error(), "x509: certificate is not valid for any names"):
		want := ""
		if u, perr := url.Parse(ep); perr == nil {
			want = u.Hostname()
		}
		what := "does not name " + want
		// The error's text names the names when its type did not survive the
		// S3 client's wrapping: "x509: certificate is valid for A, B, not H".
		if _, rest, ok := strings.Cut(err.Error(), "x509: certificate is valid for "); ok {
			if i := strings.LastIndex(rest, ", not "); i >= 0 {
				what = fmt.Sprintf("is for %s, not %s", rest[:i], want)
			}
		}
		if host != nil && host.Certificate != nil {
			var names []string
			for _, ip := range host.Certificate.IPAddresses {
				names = append(names, ip.String())
			}
			names = append(names, host.Certificate.DNSNames...)
			if len(names) == 0 {
				names = []string{"no names"}
			}
			what = fmt.Sprintf("is for %s, not %s", strings.Join(names, ", "), host.Host)
		}
		return fmt.Errorf("TLS with %s failed: the endpoint's certificate %s (a host name mismatch, not a CA problem): give --endpoint a host the certificate names: %v", ep, what, err)
	case errors.As(err, &unknown) || strings.Contains(err.Error(), "x509: certificate signed by unknown authority"):
		if cfg.S3.CABundle != "" {
			return fmt.Errorf("TLS with %s failed: its certificate is signed by a CA that neither the system store nor the CA bundle %s holds (--ca-bundle, $AWS_CA_BUNDLE): %v", ep, cfg.S3.CABundle, err)
		}
		return fmt.Errorf("TLS with %s failed (a private CA? pass it with --ca-bundle or $AWS_CA_BUNDLE): %v", ep, err)
	case strings.Contains(err.Error(), "x509: certificate has expired or is not yet valid"):
		return fmt.Errorf("TLS with %s failed: its certificate is out of its validity period (or this host's clock is off): %v", ep, err)
	}
	return fmt.Errorf("TLS with %s failed: %v", ep, err)
}

// Credentials are the keys S3Config.Credentials holds (nil: the standard chain).
type Credentials = credentials.Credentials

// StaticCredentials is for the demo and tests, which hold their own keys.
func StaticCredentials(access, secret string) *Credentials {
	return credentials.NewStaticV4(access, secret, "")
}

// KeyCredentials are keys read from a credentials file, with the session
// token when there is one.
func KeyCredentials(access, secret, sessionToken string) *Credentials {
	return credentials.NewStaticV4(access, secret, sessionToken)
}
