package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/internal/mountinfo"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// mountOptions returns the per-mount and the superblock options of the
// mount at mp from /proc/self/mountinfo.
func mountOptions(t *testing.T, mp string) (mountOpts, superOpts []string) {
	t.Helper()
	at, err := mountinfo.At(mp)
	if err != nil {
		t.Fatal(err)
	}
	if len(at) == 0 {
		t.Fatalf("%s not in /proc/self/mountinfo", mp)
	}
	m := at[len(at)-1]
	if !strings.HasPrefix(m.FSType, "fuse.") {
		t.Fatalf("%s is a %s mount", mp, m.FSType)
	}
	return m.Options, m.SuperOptions
}

// Other users are let in only when asked, and the kernel always enforces
// modes (default_permissions); the mount is read-only, nosuid and nodev.
func TestMountHasNoAllowOtherUnlessAsked(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, _ := releasedMount(t, srv, "data", nil)
	mopts, sopts := mountOptions(t, mp)
	t.Logf("default mount: options %v, superblock options %v", mopts, sopts)
	if slices.Contains(sopts, "allow_other") || slices.Contains(mopts, "allow_other") {
		t.Errorf("allow_other without being asked: %v %v", mopts, sopts)
	}
	if !slices.Contains(sopts, "default_permissions") {
		t.Errorf("no default_permissions: %v", sopts)
	}
	for _, want := range []string{"ro", "nosuid", "nodev"} {
		if !slices.Contains(mopts, want) && !slices.Contains(sopts, want) {
			t.Errorf("mount is not %s: %v %v", want, mopts, sopts)
		}
	}
	mp2, _ := releasedMount(t, srv, "data", func(c *daemon.Config) { c.FS.AllowOther = true })
	_, sopts2 := mountOptions(t, mp2)
	if !slices.Contains(sopts2, "allow_other") || !slices.Contains(sopts2, "default_permissions") {
		t.Errorf("asked for allow_other: superblock options %v, want allow_other and default_permissions", sopts2)
	}
}

// The secret key never appears in the daemon's log at debug level, in its
// errors, its metrics or profiles, or in any extended attribute, also when
// requests fail in every way, GPU reads are refused, and a mount is
// attempted with wrong credentials or with credentials in the URL.
func TestSecretsNeverLeak(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "dir/obj.bin", 3<<20, 70)
	secret := srv.SecretKey
	srv.PutRandomObject(t, "data", "dir/cold.bin", 1<<20, 72)
	// Every request may fail, in every way but a stall (a stalled listing
	// or lookup waits for the response timeout, not for the read timeout).
	proxy := startProxy(t, srv.Endpoint, faultproxy.Config{Seed: 5, Rate: 0,
		Kinds: []faultproxy.Kind{faultproxy.Reset, faultproxy.Status500, faultproxy.Status503, faultproxy.Truncate, faultproxy.LieLength},
		Match: func(*http.Request) bool { return true }})
	logs := &testenv.SyncBuffer{}
	mp, bufDir, d := releasedGPUMount(t, srv, "data", func(c *daemon.Config) {
		c.S3.Endpoint = proxy.URL
		c.Metrics.Addr = "127.0.0.1:0"
		c.Metrics.Pprof = true // the profiles too must hold no secret
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Read.ReadTimeout = 500 * time.Millisecond
		c.Read.Retries = 1
		c.Core.MetaTTL = 100 * time.Millisecond
		c.Core.NegativeTTL = 100 * time.Millisecond
	})
	var texts []string // everything a user or an operator can see
	note := func(what string, err error) {
		if err != nil {
			texts = append(texts, what+": "+err.Error())
		}
	}
	path := filepath.Join(mp, "dir", "obj.bin")
	got, err := os.ReadFile(path)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(testenv.RandomBytes(70, 0, 3<<20)) {
		t.Fatalf("read: %v", err)
	}
	_, err = os.ReadFile(filepath.Join(mp, "nope"))
	note("missing file", err)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, bufDir, "b", 1<<20, 0)
	for _, req := range []*abi.ReadRequest{hostRequest("no-such", 0, 10, 0), hostRequest(buf, 0, 2<<20, 0), hostRequest(buf, 0, 10, 1<<30)} {
		_, err := s3gds.Read(f, req)
		note("refused GPU read", err)
	}
	cold, err := os.Open(filepath.Join(mp, "dir", "cold.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	// Every request fails for a while: reads, lookups and listings log
	// their errors.
	proxy.SetRate(1)
	_, err = cold.ReadAt(make([]byte, 4096), 0)
	note("read under faults", err)
	_, err = s3gds.Read(cold, hostRequest(buf, 4096, 4096, 0))
	note("GPU read under faults", err)
	time.Sleep(150 * time.Millisecond)
	_, err = os.ReadDir(filepath.Join(mp, "dir"))
	note("listing under faults", err)
	_, err = os.Stat(filepath.Join(mp, "other"))
	note("lookup under faults", err)
	proxy.SetRate(0)
	t.Logf("faults: %s", faultstore.SortedFaultCounts(proxy.Counts()))

	// Mounts that must fail: a wrong secret, and credentials in the URL.
	wrong := "WRONG" + secret
	_, err = daemon.Start(mountConfig(t.TempDir(), daemon.S3Config{Endpoint: srv.Endpoint, Region: srv.Region, Credentials: daemon.StaticCredentials(srv.AccessKey, wrong)},
		5*time.Second, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err == nil {
		t.Fatal("a mount with a wrong secret key started")
	}
	note("wrong secret", err)
	u, _ := url.Parse(srv.Endpoint)
	u.User = url.UserPassword(srv.AccessKey, secret)
	_, err = daemon.Start(mountConfig(t.TempDir(), daemon.S3Config{Endpoint: u.String(), Region: srv.Region, Credentials: daemon.StaticCredentials(srv.AccessKey, secret)},
		5*time.Second, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err == nil {
		t.Error("a mount with credentials inside the endpoint URL started")
	}
	note("credentials in the URL", err)

	// What an operator reads: metrics, profiles, extended attributes.
	for _, p := range []string{"/metrics", "/debug/pprof/goroutine?debug=2"} {
		resp, err := http.Get("http://" + d.MetricsAddr() + p)
		if err != nil {
			t.Fatalf("scrape %s: %v", p, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if p == "/metrics" && (resp.StatusCode != 200 || !bytes.Contains(b, []byte("s3gdsfs_s3_requests_total"))) {
			t.Fatalf("/metrics: %d %.200s", resp.StatusCode, b)
		}
		texts = append(texts, p+": "+string(b))
	}
	if host, _, _ := net.SplitHostPort(d.MetricsAddr()); !net.ParseIP(host).IsLoopback() {
		t.Errorf("metrics on %s", d.MetricsAddr())
	}
	for _, p := range []string{mp, path, filepath.Join(mp, "dir")} {
		names := make([]byte, 4096)
		n, err := unix.Listxattr(p, names)
		if err != nil {
			t.Fatalf("listxattr %s: %v", p, err)
		}
		for _, name := range append(strings.Split(strings.Trim(string(names[:n]), "\x00"), "\x00"), abi.XattrCaps, abi.XattrStats, abi.XattrETag) {
			if name == "" {
				continue
			}
			v := make([]byte, 1<<20)
			if n, err := unix.Getxattr(p, name, v); err == nil {
				texts = append(texts, p+" "+name+": "+string(v[:n]))
			}
		}
	}
	texts = append(texts, "log: "+logs.String())

	all := strings.Join(texts, "\n")
	for _, s := range []string{secret, wrong, strings.ToLower(secret), url.QueryEscape(secret)} {
		if i := strings.Index(all, s); i >= 0 {
			t.Errorf("the secret key appears in what the daemon shows: ...%s...", all[max(0, i-300):min(len(all), i+len(s)+50)])
		}
	}
	// The test saw what it meant to: failures were logged and reported.
	for _, want := range []string{"ranged GET failed", "GPU read failed", "level=DEBUG", "s3gdsfs_posix_read_errors_total", "user.s3gdsfs.stats"} {
		if !strings.Contains(all, want) {
			t.Errorf("nothing containing %q was examined", want)
		}
	}
	t.Logf("examined %d KiB of logs, errors, metrics, profiles and xattrs: no secret", len(all)>>10)
}

// mountConfig is a mount of bucket "data" with the defaults, through s3,
// its start-up check bounded by check, serving no metrics.
func mountConfig(mp string, s3 daemon.S3Config, check time.Duration, log *slog.Logger) daemon.Config {
	cfg := daemon.Default()
	cfg.Mountpoint, cfg.CheckTimeout, cfg.Log = mp, check, log
	cfg.S3.Endpoint, cfg.S3.Region, cfg.S3.CABundle, cfg.S3.Credentials = s3.Endpoint, s3.Region, s3.CABundle, s3.Credentials
	cfg.Core.Bucket = "data"
	cfg.Metrics.Addr = ""
	return cfg
}

// makeCA returns a CA certificate (PEM) and a server certificate for
// 127.0.0.1 that it signed.
func makeCA(t *testing.T) (caPEM []byte, server tls.Certificate) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "s3gdsfs test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(crand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// An https endpoint whose certificate a private CA signed: with the CA in
// --ca-bundle reads are byte-exact; without it the mount refuses to start
// with a certificate error.
func TestTLSEndpointWithCustomCA(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	sum := srv.PutRandomObject(t, "data", "tls.bin", 5<<20+17, 71)
	caPEM, cert := makeCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(srv.Endpoint)
	// The reverse proxy keeps the Host header, so signatures made for the
	// TLS address verify at versitygw.
	ts := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	ts.StartTLS()
	t.Cleanup(ts.Close)
	if !strings.HasPrefix(ts.URL, "https://127.0.0.1:") {
		t.Fatalf("TLS server at %s", ts.URL)
	}

	mp, _ := releasedMount(t, srv, "data", func(c *daemon.Config) {
		c.S3.Endpoint = ts.URL
		c.S3.CABundle = caFile
	})
	if got := fileSHA256(t, filepath.Join(mp, "tls.bin"), 1<<20); got != sum {
		t.Fatalf("read over TLS: sha256 %s, want %s", got, sum)
	}

	start := time.Now()
	_, err := daemon.Start(mountConfig(t.TempDir(), daemon.S3Config{Endpoint: ts.URL, Region: srv.Region, Credentials: daemon.StaticCredentials(srv.AccessKey, srv.SecretKey)},
		10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Logf("without the CA bundle, after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("a mount trusted a certificate from an unknown CA")
	}
	if !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), ts.URL) {
		t.Errorf("error %q does not say that the endpoint's certificate is not trusted", err)
	}
	// A bundle that is not PEM is refused at start, naming the file.
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = daemon.Start(mountConfig(t.TempDir(), daemon.S3Config{Endpoint: ts.URL, Region: srv.Region, CABundle: junk, Credentials: daemon.StaticCredentials(srv.AccessKey, srv.SecretKey)},
		0, slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err == nil || !strings.Contains(err.Error(), junk) {
		t.Errorf("a bundle without certificates: %v", err)
	}
}

// documentedErrnos are the answers docs/ioctl.md lists for the ioctl.
var documentedErrnos = map[unix.Errno]bool{
	unix.EINVAL: true, unix.ENODEV: true, unix.EBADF: true, unix.ENOENT: true, unix.ERANGE: true,
	unix.EACCES: true, unix.EIO: true, unix.ESTALE: true, unix.ECANCELED: true, unix.EOPNOTSUPP: true,
	unix.EINTR: true, unix.ENOTTY: true, unix.EFAULT: true, unix.ECONNABORTED: true,
	unix.EPERM: true, unix.ELOOP: true, unix.EXDEV: true,
}

// The errno table of docs/ioctl.md lists what the daemon answers (the
// store's ENOENT of a deleted object among them) and what the kernel
// answers for it (EFAULT, ECONNABORTED): documentedErrnos, no more, no less.
func TestIoctlDocListsEveryErrno(t *testing.T) {
	b, err := os.ReadFile("../docs/ioctl.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## Return value and errno")
	if !ok {
		t.Fatal("docs/ioctl.md has no errno section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	byName := map[string]unix.Errno{"EOPNOTSUPP": unix.EOPNOTSUPP} // ErrnoName says ENOTSUP
	for en := unix.Errno(1); en < 256; en++ {
		byName[unix.ErrnoName(en)] = en
	}
	doc := map[unix.Errno]string{}
	for _, line := range strings.Split(table, "\n") {
		if name, ok := strings.CutPrefix(line, "| `E"); ok {
			name, _, _ = strings.Cut(name, "`")
			en := byName["E"+name]
			if en == 0 {
				t.Errorf("docs/ioctl.md lists E%s, no errno", name)
			}
			doc[en] = "E" + name
		}
	}
	for en := range documentedErrnos {
		if doc[en] == "" {
			t.Errorf("docs/ioctl.md does not list %s", unix.ErrnoName(en))
		}
		delete(doc, en)
	}
	for _, name := range doc {
		t.Errorf("docs/ioctl.md lists %s, which documentedErrnos lacks", name)
	}
}

func ioctlErrno(fd int, cmd uint32, arg []byte) unix.Errno {
	if len(arg) == 0 {
		arg = make([]byte, 1)
	}
	_, _, en := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(unsafePointer(arg)))
	return en
}

// iocCmd builds an ioctl number from its fields (asm-generic/ioctl.h).
func iocCmd(dir, typ, nr, size uint32) uint32 { return dir<<30 | size<<16 | typ<<8 | nr }

// Random requests of every shape at a real mount's ioctl: random bytes in
// the request's size, requests valid but for random flags, devices, handle
// names, offsets, lengths, tokens and reserved words, and other ioctl
// numbers with other sizes and directions. Every answer is success or an
// errno docs/ioctl.md lists, every success put the object's bytes where it
// said, nothing outside the stand-in directory is touched, and afterwards the
// daemon serves normal reads and versitygw holds what it held.
func TestIoctlRandomInputGetsDocumentedAnswers(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = size3M
	srv.PutRandomObject(t, "data", "obj", size, 12)
	before := bucketState(t, srv, "data")
	mp, bufDir, d := releasedGPUMount(t, srv, "data", nil)

	// Things a hostile name might reach: a file beside the stand-in
	// directory, a symlink out of it, a FIFO, a directory, an empty file.
	outside := filepath.Join(t.TempDir(), "sentinel")
	for _, err := range []error{
		os.WriteFile(outside, bytes.Repeat([]byte{0x77}, 1<<20), 0o666),
		os.Symlink(outside, filepath.Join(bufDir, "link")),
		unix.Mkfifo(filepath.Join(bufDir, "fifo"), 0o600),
		os.Mkdir(filepath.Join(bufDir, "dir"), 0o755),
		os.WriteFile(filepath.Join(bufDir, "empty"), nil, 0o600),
	} {
		if err != nil {
			t.Fatalf("setting up hostile names: %v", err)
		}
	}

	const workers = 4
	const perWorker = 4000
	var mu sync.Mutex
	answers := map[string]int{}
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		bufs := []*gpuBuf{
			newGPUBuf(t, bufDir, fmt.Sprintf("w%d-small", w), 4096),
			newGPUBuf(t, bufDir, fmt.Sprintf("w%d-mid", w), 1<<20),
			newGPUBuf(t, bufDir, fmt.Sprintf("w%d-big", w), 4<<20),
		}
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(2026, uint64(w)))
			f, err := os.Open(filepath.Join(mp, "obj"))
			if err != nil {
				problem("open: %v", err)
				return
			}
			defer f.Close()
			dir, err := os.Open(mp)
			if err != nil {
				problem("open root: %v", err)
				return
			}
			defer dir.Close()
			for range perWorker {
				fd := int(f.Fd())
				if r.IntN(20) == 0 {
					fd = int(dir.Fd())
				}
				var cmd uint32
				var arg []byte
				var target *gpuBuf
				var req abi.ReadRequest
				kind := r.IntN(10)
				switch {
				case kind == 0: // random bytes of the right size
					cmd, arg = abi.IocRead, randBytes(r, abi.Size)
				case kind == 1: // another ioctl number, another size or direction
					typ := []uint32{'S', 'S', 'Q', 0xAB}[r.IntN(4)]
					cmd = iocCmd(uint32(r.IntN(4)), typ, uint32(r.IntN(256)), uint32(r.IntN(1<<14)))
					if cmd == abi.IocRead {
						cmd++
					}
					arg = randBytes(r, int(cmd>>16&(1<<14-1)))
				default: // a well-formed request with random fields
					req, target = randomRequest(r, bufs, bufDir, outside)
					cmd, arg = abi.IocRead, req.Encode()
				}
				en := ioctlErrno(fd, cmd, arg)
				name := "ok"
				if en != 0 {
					name = unix.ErrnoName(en)
				}
				mu.Lock()
				answers[name]++
				mu.Unlock()
				if en != 0 && !documentedErrnos[en] {
					problem("ioctl 0x%08x (%d bytes): %v, not a documented answer", cmd, len(arg), en)
				}
				if en != 0 || cmd != abi.IocRead {
					if en == 0 {
						problem("ioctl 0x%08x succeeded", cmd)
					}
					continue
				}
				var out abi.ReadRequest
				out.UnmarshalBinary(arg)
				if fd != int(f.Fd()) {
					problem("a GPU read on the directory succeeded")
					continue
				}
				if target == nil {
					problem("a read with no valid destination succeeded: %+v", req)
					continue
				}
				want := uint64(max(0, min(int64(req.Length), int64(size)-int64(min(req.Offset, math.MaxInt64)))))
				if req.Offset >= size {
					want = 0
				}
				if req.Flags&abi.FlagRDMAOnly != 0 && (out.Bytes != 0 || want != 0) {
					// No RDMA server: an RDMA-only read succeeds only with nothing to move.
					problem("RDMA-only read %d@%d succeeded with %d bytes (%d over HTTP), want a decline", req.Length, req.Offset, out.Bytes, out.HTTPBytes)
					continue
				}
				if out.Bytes != want || out.HTTPBytes != want || out.RDMABytes != 0 {
					problem("read %d@%d into %s+%d: reported %d bytes, want %d", req.Length, req.Offset, target.name, req.DstOffset, out.Bytes, want)
					continue
				}
				if want > 0 && sha256.Sum256(target.mem[req.DstOffset:req.DstOffset+want]) != sha256.Sum256(testenv.RandomBytes(12, int64(req.Offset), int(want))) {
					problem("CORRUPT: read %d@%d into %s+%d: destination differs from the object", req.Length, req.Offset, target.name, req.DstOffset)
				}
			}
		}()
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	var names []string
	for k := range answers {
		names = append(names, k)
	}
	sort.Strings(names)
	var summary []string
	for _, k := range names {
		summary = append(summary, fmt.Sprintf("%s=%d", k, answers[k]))
	}
	t.Logf("%d random ioctls: %s", workers*perWorker, strings.Join(summary, " "))
	if answers["ok"] == 0 || answers["EINVAL"] == 0 || answers["ERANGE"] == 0 || answers["EBADF"] == 0 || answers["ENOTTY"] == 0 {
		t.Errorf("the random requests did not reach the daemon's main answers: %v", answers)
	}

	// Nothing outside the stand-in directory changed.
	if b, _ := os.ReadFile(outside); !bytes.Equal(b, bytes.Repeat([]byte{0x77}, 1<<20)) {
		t.Error("a file outside the stand-in directory was written")
	}
	// The daemon serves as before.
	if got := fileSHA256(t, filepath.Join(mp, "obj"), 1<<20); got != testenv.RandomSHA256(size, 12) {
		t.Fatalf("read after the random ioctls: sha256 %s", got)
	}
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := newGPUBuf(t, bufDir, "final", size)
	if res, err := s3gds.Read(f, hostRequest(b.name, 0, size, 0)); err != nil || res.Bytes != size ||
		sha256.Sum256(b.mem) != sha256.Sum256(testenv.RandomBytes(12, 0, size)) {
		t.Fatalf("GPU read after the random ioctls: %+v %v", res, err)
	}
	snap, _ := d.Metrics.Snapshot()
	t.Logf("gpu_read_errors_total %v", snap["gpu_read_errors_total"])
	if after := bucketState(t, srv, "data"); after != before {
		t.Fatalf("the bucket changed:\n%s\nwas\n%s", after, before)
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// randomRequest is a request of the right size and version (mostly) whose
// other fields are drawn from values near the edges. It returns the buffer
// the request names, when it names one of bufs.
func randomRequest(r *rand.Rand, bufs []*gpuBuf, bufDir, outside string) (abi.ReadRequest, *gpuBuf) {
	req := abi.NewReadRequest()
	if r.IntN(20) == 0 {
		req.Size = r.Uint32()
	}
	if r.IntN(20) == 0 {
		req.Version = uint32(r.IntN(4))
	}
	req.Flags = abi.FlagHostBuffer
	switch r.IntN(12) {
	case 0:
		req.Flags = abi.Flags(r.Uint32())
	case 1:
		req.Flags = abi.Flags(r.IntN(16))
	case 2:
		req.Flags |= abi.FlagHTTPOnly
	case 3:
		req.Flags |= abi.FlagDeclineIsError
	}
	if r.IntN(15) == 0 {
		req.Device = []int32{-1, 1, 7, math.MaxInt32, math.MinInt32}[r.IntN(5)]
	}
	var target *gpuBuf
	names := []string{"", "no-such", "../sentinel", outside, "/etc/passwd", "/dev/zero", "link", "fifo", "dir", "empty", "./", "/",
		"a/../../b", strings.Repeat("x", 63)}
	switch n := r.IntN(10); {
	case n < 6:
		target = bufs[r.IntN(len(bufs))]
		name := target.name
		if r.IntN(4) == 0 {
			name = filepath.Join(bufDir, name)
		}
		copy(req.IPCHandle[:], name)
	case n < 8:
		copy(req.IPCHandle[:], names[r.IntN(len(names))])
	case n < 9:
		copy(req.IPCHandle[:], randBytes(r, abi.IPCHandleLen)) // maybe no NUL
	default:
		b := randBytes(r, r.IntN(abi.IPCHandleLen))
		copy(req.IPCHandle[:], bytes.ReplaceAll(b, []byte{0}, []byte{'a'}))
	}
	edges := func(limit uint64) uint64 {
		switch r.IntN(8) {
		case 0:
			return 0
		case 1:
			return uint64(r.IntN(4097))
		case 2:
			return limit - uint64(r.IntN(5))
		case 3:
			return limit + uint64(r.IntN(5))
		case 4:
			return r.Uint64()
		case 5:
			return math.MaxUint64 - uint64(r.IntN(3))
		case 6:
			return 1 << 63
		}
		return uint64(r.Int64N(int64(limit) + 1))
	}
	req.Offset = edges(size3M)
	req.Length = edges(1 << 20)
	req.DstOffset = edges(4096)
	switch r.IntN(12) {
	case 0:
		copy(req.RDMAToken[:], randBytes(r, abi.TokenLen)) // maybe no NUL
	case 1:
		copy(req.RDMAToken[:], "0123456789abcdef")
	}
	if r.IntN(20) == 0 {
		req.Reserved[r.IntN(2)] = r.Uint64() | 1
	}
	// Out fields hold garbage on the way in; the daemon ignores them.
	req.Bytes, req.ElapsedNs, req.Transport, req.Decline = r.Uint64(), r.Uint64(), abi.Transport(r.Uint32()), abi.Decline(r.Uint32())
	// RDMA-only is valid on its own (not with HTTP-only): with no RDMA
	// server here it is declined, unless there is no byte to move.
	flagsOK := req.Flags&^(abi.FlagHTTPOnly|abi.FlagDeclineIsError|abi.FlagRDMAOnly) == abi.FlagHostBuffer &&
		req.Flags&(abi.FlagHTTPOnly|abi.FlagRDMAOnly) != abi.FlagHTTPOnly|abi.FlagRDMAOnly
	valid := req.Size == abi.Size && req.Version == abi.Version && flagsOK &&
		req.Device == 0 && req.Reserved == [2]uint64{} && bytes.IndexByte(req.RDMAToken[:], 0) >= 0
	if !valid {
		target = nil
	}
	return req, target
}

const size3M = 3<<20 + 5

// bucketState lists a bucket's keys, sizes and ETags.
func bucketState(t *testing.T, srv *testenv.Server, bucket string) string {
	t.Helper()
	var lines []string
	for o := range srv.Client.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		lines = append(lines, fmt.Sprintf("%s %d %s", o.Key, o.Size, o.ETag))
	}
	if len(lines) == 0 {
		t.Fatal("empty bucket")
	}
	return strings.Join(lines, "\n")
}

// The host stand-in writes a buffer file as root, so a caller on a mount
// other users may use (--allow-other) names only a regular file of its own
// beneath the stand-in directory, through no symlink. A user naming root's
// file, another user's, a symlink (to a file of its own outside), a name
// outside or a FIFO is refused with its errno and nothing is written;
// the user's own buffer is filled, and the daemon serves everyone after.
func TestHostStandinWritesOnlyTheCallersFiles(t *testing.T) {
	const nobody, other = 65534, 4242
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 64<<10 + 7
	srv.PutRandomObject(t, "data", "obj", size, 41)
	want := sha256.Sum256(testenv.RandomBytes(41, 0, size))
	mp, bufDir, _ := gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.FS.AllowOther = true // else the kernel refuses other users' ioctls itself
		c.GPU.StandinAllowOther = true
	})
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	// buffer makes a stand-in buffer of size bytes of fill owned by uid.
	buffer := func(dir, name string, uid int) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, bytes.Repeat([]byte{0xEE}, size), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, uid, uid); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// Beside the stand-in directory (t.TempDir's next), and at a path
	// short enough to name whole in a handle.
	outside := buffer(t.TempDir(), "mine-outside", nobody)
	short, err := os.MkdirTemp("", "so")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(short)
	outsideAbs := buffer(short, "mine", nobody)
	paths := []string{buffer(bufDir, "roots", 0), buffer(bufDir, "others", other), outside, outsideAbs}
	if err := os.Symlink(outside, filepath.Join(bufDir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(bufDir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(bufDir, "fifo"), nobody, nobody)
	sums := map[string][32]byte{}
	for _, p := range paths {
		sums[p] = sha256.Sum256(mustRead(t, p))
	}

	t.Setenv("S3GDSFS_TEST_LENGTH", fmt.Sprint(size))
	asNobody := &syscall.Credential{Uid: nobody, Gid: nobody}
	for _, tc := range []struct {
		what, name string
		want       unix.Errno
	}{
		{"root's file", "roots", unix.EPERM},
		{"another user's file", "others", unix.EPERM},
		{"a symlink to the caller's file outside", "link", unix.ELOOP},
		{"the caller's file outside, by absolute name", outsideAbs, unix.EXDEV},
		{"the caller's file outside, by ..", "../" + filepath.Base(filepath.Dir(outside)) + "/mine-outside", unix.EXDEV},
		{"a FIFO of the caller's", "fifo", unix.EINVAL},
	} {
		if len(tc.name) >= abi.IPCHandleLen {
			t.Fatalf("%s: name %q does not fit in a handle", tc.what, tc.name)
		}
		out, err := childIoctlAs(t, f, tc.name, asNobody)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || unix.Errno(ee.ExitCode()) != tc.want || out != "" {
			t.Errorf("%s: child as nobody: %v (%q); want exit with %v (%d)", tc.what, err, out, unix.ErrnoName(tc.want), tc.want)
		}
	}
	for _, p := range paths {
		if sha256.Sum256(mustRead(t, p)) != sums[p] {
			t.Errorf("%s was written", p)
		}
	}

	// The caller's own buffer is filled, and root's reads are served.
	mine := buffer(bufDir, "mine", nobody)
	if out, err := childIoctlAs(t, f, "mine", asNobody); err != nil {
		t.Fatalf("child as nobody into its own buffer: %v (%q)", err, out)
	}
	if sha256.Sum256(mustRead(t, mine)) != want {
		t.Error("the caller's own buffer does not hold the object")
	}
	b := newGPUBuf(t, bufDir, "root-after", size)
	if res, err := s3gds.Read(f, hostRequest(b.name, 0, size, 0)); err != nil || res.Bytes != size || sha256.Sum256(b.mem) != want {
		t.Fatalf("root's read after the refusals: %+v %v", res, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A directory in a buffer's name swapped with a symlink to a directory
// outside while GPU reads name the buffer through it: every read lands in
// the file inside or is refused (ELOOP), and the file outside, owned by the
// caller so only the name's resolution protects it, never changes. Each
// read goes through a file opened for it, so that its import is resolved
// anew rather than found in the daemon's cache.
func TestHostStandinDirectorySwapNeverWritesOutside(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 4096
	srv.PutRandomObject(t, "data", "obj", size, 43)
	want := sha256.Sum256(testenv.RandomBytes(43, 0, size))
	mp, bufDir, _ := gpuMount(t, srv, "data", nil)

	outDir := t.TempDir()
	outside := filepath.Join(outDir, "buf")
	if err := os.WriteFile(outside, bytes.Repeat([]byte{0x77}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	before := sha256.Sum256(mustRead(t, outside))
	d, e := filepath.Join(bufDir, "d"), filepath.Join(bufDir, "e")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "buf"), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outDir, e); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Atomically where the filesystem can, else by three renames.
			if unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, e, unix.RENAME_EXCHANGE) != nil {
				tmp := filepath.Join(bufDir, "tmp")
				os.Rename(d, tmp)
				os.Rename(e, d)
				os.Rename(tmp, e)
			}
		}
	}()
	var landed, refused, total int
	answers := map[string]int{}
	for ; total < 20000 && (total < 500 || landed < 20 || refused < 20); total++ {
		f, err := os.Open(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s3gds.Read(f, hostRequest("d/buf", 0, size, 0))
		f.Close()
		var en unix.Errno
		switch {
		case err == nil && res.Bytes == size:
			landed++
			answers["ok"]++
		case errors.As(err, &en) && (en == unix.ELOOP || en == unix.EBADF):
			// EBADF: between the renames of a filesystem without
			// RENAME_EXCHANGE there is no "d".
			refused++
			answers[unix.ErrnoName(en)]++
		default:
			answers[fmt.Sprint(err)]++ // reported after the file outside is checked
		}
	}
	close(stop)
	<-done
	t.Logf("GPU reads through a swapped directory: %v", answers)
	if sha256.Sum256(mustRead(t, outside)) != before {
		t.Fatal("bytes landed in the file outside the stand-in directory")
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
		t.Errorf("the directory outside holds %d entries; want only its file", len(ents))
	}
	if landed+refused != total {
		t.Errorf("%d of %d reads neither landed nor were refused with ELOOP: %v", total-landed-refused, total, answers)
	}
	if landed == 0 || refused == 0 {
		t.Fatalf("the swap never raced the reads: %v", answers)
	}
	// Whichever name the real directory has now, its file holds the object.
	inside := filepath.Join(d, "buf")
	if fi, err := os.Lstat(d); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		inside = filepath.Join(e, "buf")
	}
	if sha256.Sum256(mustRead(t, inside)) != want {
		t.Error("the reads that landed did not write the file inside")
	}
}
