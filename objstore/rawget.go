package objstore

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"
	"golang.org/x/sys/unix"
)

// RawGetter is implemented by stores that can hand over a GET's body as the
// TCP connection it arrives on, so that a reader moves it on with splice(2)
// and never copies it through the daemon's memory (vfs/splice.go).
type RawGetter interface {
	// GetRaw sends the GET of [off, off+n) pinned to v, as GetRange does
	// (the reply's version is checked the same way), on a connection of its
	// own, and returns its body. ErrNoRaw when the store cannot: TLS, a
	// proxy, a store that is not HTTP.
	GetRaw(ctx context.Context, bucket, key string, off, n int64, v Version) (*RawBody, error)
}

// ErrNoRaw means the store cannot hand over a GET body as a socket.
var ErrNoRaw = errors.New("store cannot hand over GET bodies as sockets")

// emptySHA256 is the payload hash of a request without a body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// RawBody is the body of a GET on its own TCP connection. It is not safe for
// concurrent use.
type RawBody struct {
	conn *net.TCPConn
	rc   syscall.RawConn
	// head holds body bytes that arrived with the headers.
	head []byte
	left int64
	// timeout bounds a wait for the next byte: a stalled server ends the
	// body instead of hanging its reader.
	timeout time.Duration
	// onBytes is told of every byte taken (metering).
	onBytes func(int)
	onClose func(left int64)
	closed  bool
	// waits counts the splices that found the socket short and waited.
	waits int
	// slow is set once the store proved slower than a wake-up's worth of
	// bytes per timeout: the body's waits then wake for any byte.
	slow bool
	// keep, when set, takes the connection back for the next GET once the
	// body is read to its end; broken says a read failed or was aborted,
	// which leaves the connection at no known place.
	keep   func(*net.TCPConn)
	broken atomic.Bool
}

// failed marks the body broken after an error: its connection is at no
// known place in the reply.
func (b *RawBody) failed(got int, err error) (int, error) {
	if err != nil {
		b.broken.Store(true)
	}
	return got, err
}

// Waits is how many times a splice found the socket short of the bytes
// asked for and waited for them (each wait parks the goroutine until the
// socket is ready: a thread woken).
func (b *RawBody) Waits() int { return b.waits }

// NewRawBody is the body of n bytes that conn carries next, head of them
// already read off it (with the headers): for RawGetter implementations.
// timeout bounds each wait for the next byte (0: none).
func NewRawBody(conn *net.TCPConn, head []byte, n int64, timeout time.Duration) (*RawBody, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &RawBody{conn: conn, rc: rc, head: head, left: n, timeout: timeout}, nil
}

// SetTimeout bounds each wait for the next byte from now on (0: none): for
// a reader whose stall bound is not the store's response timeout.
func (b *RawBody) SetTimeout(d time.Duration) { b.timeout = d }

// Timeout is the bound on each wait for the next byte (0: none).
func (b *RawBody) Timeout() time.Duration { return b.timeout }

// Left is how many body bytes have not been taken yet.
func (b *RawBody) Left() int64 { return b.left }

// SpliceTo moves up to n more bytes of the body into the pipe whose write
// end is pipeW (which must be non-blocking), and returns how many it moved:
// n, or fewer once the pipe is full (a pipe holds a number of buffers, and a
// socket's bytes may come in pieces smaller than a page). The bytes that
// came with the headers are written; the rest are spliced from the socket,
// so they stay in the kernel's pages. A body that ends first gives
// io.ErrUnexpectedEOF; one that brings no byte for the timeout,
// os.ErrDeadlineExceeded. After an error the body is of no further use.
func (b *RawBody) SpliceTo(pipeW int, n int) (int, error) {
	return b.failed(b.splice(pipeW, n, true))
}

// SpliceReady moves up to n more bytes of the body into the pipe, as
// SpliceTo does, but only those the socket holds already: it never waits,
// and returns 0 when nothing is there. Its errors are SpliceTo's.
func (b *RawBody) SpliceReady(pipeW int, n int) (int, error) {
	return b.failed(b.splice(pipeW, n, false))
}

func (b *RawBody) splice(pipeW int, n int, wait bool) (int, error) {
	if b.closed {
		return 0, errors.New("splice from a closed body")
	}
	if int64(n) > b.left {
		return 0, fmt.Errorf("splice of %d bytes from a body with %d left", n, b.left)
	}
	got := 0
	if len(b.head) > 0 {
		w, err := unix.Write(pipeW, b.head[:min(len(b.head), n)])
		if err == unix.EAGAIN {
			return 0, nil // full
		}
		if err != nil {
			return 0, fmt.Errorf("write into pipe: %w", err)
		}
		b.head = b.head[w:]
		got += w
		b.taken(w)
	}
	if got == n || len(b.head) > 0 {
		return got, nil
	}
	if b.timeout > 0 {
		b.conn.SetReadDeadline(time.Now().Add(b.timeout))
	}
	var serr error
	lowat := false
	err := b.wait(func(fd uintptr) bool {
		for got < n {
			m, e := unix.Splice(int(fd), nil, pipeW, nil, n-got, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case e == unix.EAGAIN:
				// The socket has nothing now, or the pipe is full; only
				// the first is worth waiting for, and then for the rest
				// of the request at once (SO_RCVLOWAT: the socket reads
				// as ready only when that much is in), not packet by packet.
				if !wait || !PipeHasRoom(pipeW) {
					return true
				}
				if !b.slow {
					lowat = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n-got) == nil
				}
				b.waits++
				return false
			case e == unix.EINTR:
				continue
			case e != nil:
				serr = fmt.Errorf("splice from socket: %w", e)
				return true
			case m == 0:
				serr = io.ErrUnexpectedEOF
				return true
			}
			got += int(m)
			b.taken(int(m))
			if b.timeout > 0 {
				b.conn.SetReadDeadline(time.Now().Add(b.timeout))
			}
		}
		return true
	})
	if lowat {
		b.rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
	}
	if err != nil {
		return got, fmt.Errorf("body after %d of %d bytes: %w", got, n, err)
	}
	return got, serr
}

// ReadFull copies the next len(p) bytes of the body into p: for bytes that
// cannot be spliced. Its errors are SpliceTo's.
func (b *RawBody) ReadFull(p []byte) error {
	_, err := b.failed(0, b.readFull(p))
	return err
}

// readWake is the most a read of a raw body waits for at once. A reader
// woken for every packet's worth of bytes spends more on its wake-ups, and
// makes the server send more often, than on the bytes (docs/benchmarks.md,
// "Where the time goes").
const readWake = 256 << 10

func (b *RawBody) readFull(p []byte) error {
	if b.closed {
		return errors.New("read from a closed body")
	}
	if int64(len(p)) > b.left {
		return fmt.Errorf("read of %d bytes from a body with %d left", len(p), b.left)
	}
	got := copy(p, b.head)
	b.head = b.head[got:]
	b.taken(got)
	if got == len(p) {
		return nil
	}
	if b.timeout > 0 {
		b.conn.SetReadDeadline(time.Now().Add(b.timeout))
	}
	var rerr error
	lowat := 1
	err := b.wait(func(fd uintptr) bool {
		for got < len(p) {
			k, e := unix.Read(int(fd), p[got:])
			switch {
			case e == unix.EAGAIN:
				// Wait for what this read still needs, up to readWake, at
				// once: never more, or the body's last bytes would not
				// wake it.
				want := min(readWake, len(p)-got)
				if b.slow {
					want = 1
				}
				if want != lowat &&
					unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, want) == nil {
					lowat = want
				}
				return false
			case e == unix.EINTR:
				continue
			case e != nil:
				rerr = e
				return true
			case k == 0:
				rerr = io.ErrUnexpectedEOF
				return true
			}
			got += k
			b.taken(k)
			if b.timeout > 0 {
				b.conn.SetReadDeadline(time.Now().Add(b.timeout))
			}
		}
		return true
	})
	if lowat != 1 {
		b.rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
	}
	if err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("body after %d of %d bytes: %w", got, len(p), err)
	}
	return nil
}

// wait runs read on the socket until it says it is done: read takes what
// the socket holds and returns false to wait for more, for as many bytes at
// once as the wake-up mark (SO_RCVLOWAT) it set says. A wait that ends at
// the body's timeout with bytes in the socket, fewer than the mark, was no
// stall: bytes came, only too slowly to wake the reader. From then on the
// body wakes for any byte (a store that slow gains nothing from fewer
// wake-ups) and the wait goes on; so a transfer that keeps moving is never
// cut, while a fast one still wakes once per many bytes.
func (b *RawBody) wait(read func(fd uintptr) bool) error {
	for {
		err := b.rc.Read(read)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || b.timeout <= 0 || !b.queued() {
			return err
		}
		b.slow = true
		b.rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
		b.conn.SetReadDeadline(time.Now().Add(b.timeout))
	}
}

// queued says whether the socket holds bytes not yet taken.
func (b *RawBody) queued() bool {
	n := 0
	b.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// Abort ends a read or splice of the body in progress on another goroutine,
// which then fails: for a caller that gave up. Close still follows.
func (b *RawBody) Abort() {
	b.broken.Store(true)
	b.conn.Close()
}

// PipeHasRoom reports whether the pipe whose write end is pipeW has a
// buffer free.
func PipeHasRoom(pipeW int) bool {
	p := []unix.PollFd{{Fd: int32(pipeW), Events: unix.POLLOUT}}
	n, err := unix.Poll(p, 0)
	return err == nil && n == 1
}

func (b *RawBody) taken(k int) {
	b.left -= int64(k)
	if b.onBytes != nil {
		b.onBytes(k)
	}
}

// Close ends the GET. A body read to its end leaves its connection for the
// next GET, where the server keeps it; otherwise the connection is closed,
// whatever is left unread.
func (b *RawBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if b.onClose != nil {
		b.onClose(b.left)
	}
	if b.keep != nil && b.left == 0 && !b.broken.Load() {
		b.keep(b.conn)
		return nil
	}
	return b.conn.Close()
}

// GetRaw implements RawGetter: one signed GET written by hand on a fresh
// connection, because net/http buffers the start of a body where splice
// cannot reach it and keeps its connections to itself.
func (m *Minio) GetRaw(ctx context.Context, bucket, key string, off, n int64, v Version) (*RawBody, error) {
	where := bucket + "/" + key
	if n <= 0 || off < 0 {
		return nil, fmt.Errorf("get %s: bad range offset %d length %d", where, off, n)
	}
	ep := m.getCore.EndpointURL()
	if ep.Scheme != "http" {
		return nil, fmt.Errorf("get %s: %w: %s", where, ErrNoRaw, ep.Scheme)
	}
	u := &url.URL{Scheme: "http", Host: ep.Host, Path: "/" + bucket + "/" + key,
		RawPath: "/" + bucket + "/" + s3utils.EncodePath(key)}
	if m.virtualHost {
		u.Host = bucket + "." + ep.Host
		u.Path, u.RawPath = "/"+key, "/"+s3utils.EncodePath(key)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", where, err)
	}
	if p, err := http.ProxyFromEnvironment(req); err != nil || p != nil {
		return nil, fmt.Errorf("get %s: %w: through a proxy", where, ErrNoRaw)
	}
	opts, err := pinnedRange(off, n, v)
	if err != nil {
		return nil, err
	}
	for k, vs := range opts.Header() {
		req.Header[k] = vs
	}
	req.Header.Set("User-Agent", "s3gdsfs")
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	creds, err := m.getCore.GetCreds()
	if err != nil {
		return nil, fmt.Errorf("get %s: credentials: %w", where, err)
	}
	region, err := m.getCore.GetBucketLocation(ctx, bucket)
	if err != nil {
		return nil, classify(err, bucket, key)
	}
	if creds.AccessKeyID != "" {
		req = signer.SignV4(*req, creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken, region)
	}

	resp, b, err := m.rawConns.Send(ctx, req, m.dialRaw, m.responseTimeout)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", where, err)
	}
	if b == nil {
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return nil, rawError(resp, bucket, key)
		}
		return nil, fmt.Errorf("get %s: asked for %d bytes at %d, server offered %d (transfer encoding %v)", where, n, off, resp.ContentLength, resp.TransferEncoding)
	}
	if err := checkRawReply(resp, off, n, v); err != nil {
		b.Close() // the body unread: its connection goes
		return nil, fmt.Errorf("get %s: %w", where, err)
	}
	return b, nil
}

// rawDialer dials GetRaw's connections, each with a receive buffer of
// receiveBuffer bytes where that is set.
func rawDialer(connectTimeout time.Duration, receiveBuffer int) DialFunc {
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	if size := receiveBuffer; size > 0 {
		// Set before the connect, so that the window the server is
		// offered from the first segment on is the larger one.
		d.Control = func(network, address string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
					unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, size)
				}
			})
		}
	}
	return TCPDialer(d)
}

// checkRawReply checks a 2xx reply to GetRaw's request against what was
// asked: its length, where its bytes start, and the object's version.
func checkRawReply(resp *http.Response, off, n int64, v Version) error {
	if resp.ContentLength != n {
		return fmt.Errorf("asked for %d bytes at %d, server offered %d", n, off, resp.ContentLength)
	}
	if resp.StatusCode == http.StatusPartialContent {
		if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != off {
			return fmt.Errorf("asked for bytes from %d, server sent %q", off, resp.Header.Get("Content-Range"))
		}
	} else if off != 0 || n != v.Size {
		return fmt.Errorf("asked for %d bytes at %d, server sent the whole object (%d)", n, off, resp.ContentLength)
	}
	return checkVersion(v, cleanETag(resp.Header.Get("ETag")), resp.Header)
}

// ctxErr prefers the context's error: a deadline set to end the wait
// reads as a timeout otherwise.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// rawError turns an error reply into the package's errors, as classify does
// for minio-go's.
func rawError(resp *http.Response, bucket, key string) error {
	return classify(errorReply(resp, bucket, key), bucket, key)
}

// errorReply reads an S3 error reply (its XML Code and Message, or the
// status's text where it has none) as minio-go reports one.
func errorReply(resp *http.Response, bucket, key string) minio.ErrorResponse {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	xml.Unmarshal(body, &e)
	if e.Code == "" {
		e.Code = strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "")
	}
	return minio.ErrorResponse{Code: e.Code, Message: e.Message, StatusCode: resp.StatusCode,
		BucketName: bucket, Key: key}
}

// contentRangeStart parses the first byte out of "bytes a-b/total".
func contentRangeStart(s string) (int64, bool) {
	s, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(s, "-")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(a, 10, 64)
	return v, err == nil
}

// GetRaw forwards to Inner when it is a RawGetter, counting the request
// under op "get" as GetRange does and its bytes as they are taken.
func (s Metered) GetRaw(ctx context.Context, bucket, key string, off, n int64, v Version) (*RawBody, error) {
	g, ok := s.Inner.(RawGetter)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoRaw, s.Inner)
	}
	start := time.Now()
	s.M.BytesInFlight.Add(float64(n))
	b, err := g.GetRaw(ctx, bucket, key, off, n, v)
	s.observe("get", start, err)
	if err != nil {
		s.M.BytesInFlight.Sub(float64(n))
		return nil, err
	}
	// Bytes leave the in-flight count as they are taken or given up.
	b.onBytes = func(k int) {
		s.M.BytesInFlight.Sub(float64(k))
		s.M.S3BytesReceived.Add(float64(k))
	}
	b.onClose = func(left int64) { s.M.BytesInFlight.Sub(float64(left)) }
	return b, nil
}
