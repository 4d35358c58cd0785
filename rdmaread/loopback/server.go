package loopback

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// Headers of the RDMA reply.
const (
	replyHeader = "x-amz-rdma-reply"
	bytesHeader = "x-amz-rdma-bytes-transferred"
)

// StagerFunc gives the stager that copies into a device's memory. It is
// called for every transfer, so it should return a kept stager (the
// engine's Stager does); the Server does not close the stagers it is given.
type StagerFunc func(device int) (cufile.Stager, error)

// Server is an S3 endpoint with loopback RDMA in front of a real one.
//
// Bad tokens are refused with HTTP 400 and an S3 error body: InvalidArgument
// for a token that does not parse, InvalidToken for one that names no
// registered region (unknown rkey, another fabric's DCT, or an address
// range outside the region) or a region smaller than the range. The
// messages name x-amz-rdma-token.
type Server struct {
	f        *Fabric
	upstream *url.URL
	stagers  StagerFunc
	// proxy passes requests without a token through.
	proxy *httputil.ReverseProxy
	// upstreamTransport is the proxy's, and fetches token GETs from an
	// https upstream; Close lets its kept connections go.
	upstreamTransport *http.Transport
	// conns fetch token GETs from an http upstream, their bodies read
	// straight into the staging slots as the GPU path reads its own.
	conns *objstore.RawConns

	mu  sync.Mutex
	srv *http.Server
}

// target is where a GET with a token writes.
type target struct {
	token  rdmatoken.Token
	region *region
	off    uint64 // in the region's allocation
	short  bool
}

// Kept connections to the upstream: enough for every transfer the daemon
// runs at once (its --gpu-max-ops), closed after a minute idle.
const (
	keptPerHost = 256
	keptIdle    = time.Minute
)

// NewServer proxies to upstream (http://host:port) and writes through the
// stagers stagers gives.
func NewServer(f *Fabric, upstream string, stagers StagerFunc) (*Server, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("loopback: upstream %q: want http://host[:port]", upstream)
	}
	s := &Server{f: f, upstream: u, stagers: stagers, conns: objstore.NewRawConns(keptPerHost, keptIdle)}
	s.upstreamTransport = &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: keptPerHost}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// Host is a signed header: the upstream must see the one the
			// client signed.
			pr.Out.Host = pr.In.Host
		},
		Transport: s.upstreamTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, http.StatusInternalServerError, "InternalError", "loopback: "+err.Error())
		},
	}
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tokenStr := r.Header.Get(rdmatoken.Header)
	if (r.Method != http.MethodGet && r.Method != http.MethodPut) || tokenStr == "" {
		s.f.count(func(st *Stats) { st.Passthrough++ })
		s.proxy.ServeHTTP(w, r)
		return
	}
	s.f.mu.Lock()
	mode := s.f.takeLocked(false)
	stall := s.f.stall
	s.f.mu.Unlock()

	switch mode {
	case Decline501:
		s.f.count(func(st *Stats) { st.Declined++ })
		writeError(w, r, http.StatusNotImplemented, "NotImplemented", "RDMA is not available for this request")
		return
	case RejectToken:
		s.f.count(func(st *Stats) { st.Rejected++ })
		writeError(w, r, http.StatusBadRequest, "InvalidToken", "x-amz-rdma-token was refused")
		return
	case IgnoreToken:
		s.f.count(func(st *Stats) { st.Ignored++ })
		s.proxy.ServeHTTP(w, r)
		return
	case Stall:
		s.f.count(func(st *Stats) { st.Stalled++ })
		t := time.NewTimer(stall)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	tok, err := rdmatoken.Parse(tokenStr)
	if err != nil {
		s.f.count(func(st *Stats) { st.Rejected++ })
		writeError(w, r, http.StatusBadRequest, "InvalidArgument", err.Error())
		return
	}
	reg, off, err := s.f.lookup(tok)
	if err != nil {
		s.f.count(func(st *Stats) { st.Rejected++ })
		writeError(w, r, http.StatusBadRequest, "InvalidToken", "x-amz-rdma-token: "+err.Error())
		return
	}
	t := &target{token: tok, region: reg, off: off, short: mode == ShortTransfer}
	start := time.Now()
	if r.Method == http.MethodPut {
		s.servePut(w, r, t)
	} else {
		s.serveToken(w, r, t)
	}
	s.f.count(func(st *Stats) { st.ServeNanos += int64(time.Since(start)) })
}

// serveToken turns the upstream's reply into a loopback RDMA write: the
// bytes go into the region and the reply keeps the object headers but
// carries the RDMA reply headers and no body. Replies other than 200 and
// 206 (errors, 304, 412) pass through unchanged.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request, t *target) {
	ctx := r.Context()
	resp, raw, err := s.fetch(ctx, r)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "InternalError", "loopback: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		if raw != nil {
			raw.Close()
		}
		relay(w, resp)
		return
	}
	var body io.Reader = resp.Body
	n := resp.ContentLength
	if raw != nil {
		defer raw.Close()
		stop := context.AfterFunc(ctx, raw.Abort) // a caller that gave up ends the read
		defer stop()
		body = rawReader{raw}
	} else if n < 0 {
		// Unknown length: read at most one byte past what the token holds.
		all, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.token.Size)+1))
		if err != nil {
			writeError(w, r, http.StatusInternalServerError, "InternalError", "loopback: "+err.Error())
			return
		}
		n, body = int64(len(all)), bytes.NewReader(all)
	}
	if n > int64(t.token.Size) {
		s.f.count(func(st *Stats) { st.Rejected++ })
		writeError(w, r, http.StatusBadRequest, "InvalidToken",
			fmt.Sprintf("x-amz-rdma-token names %d bytes, the range has %d", t.token.Size, n))
		return
	}
	want := n
	if t.short {
		want = n / 2
	}
	wrote, err := s.write(ctx, t.region.alloc, t.off, body, want)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "InternalError",
			fmt.Sprintf("loopback: RDMA write of %d bytes failed after %d: %v", want, wrote, err))
		return
	}
	s.f.count(func(st *Stats) {
		st.Served++
		st.ServedBytes += wrote
		if wrote < n {
			st.Short++
		}
	})
	writeRDMAReply(w, resp, wrote)
}

// servePut turns a PUT (an UploadPart or a whole object) with a token and
// no body into a loopback RDMA read: the token's bytes are read out of the
// region through the device's stager (device to host, the NIC's part) and
// sent upstream as the request's body; the reply is the upstream's with
// the RDMA reply headers. Short transfer reads and sends half of them.
func (s *Server) servePut(w http.ResponseWriter, r *http.Request, t *target) {
	ctx := r.Context()
	if r.ContentLength > 0 {
		writeError(w, r, http.StatusBadRequest, "InvalidRequest", "loopback: a PUT with x-amz-rdma-token carries no body")
		return
	}
	want := int64(t.token.Size)
	if t.short {
		want /= 2
	}
	stager, err := s.stagers(t.region.alloc.Device())
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "InternalError", "loopback: "+err.Error())
		return
	}
	body, err := newDeviceReader(ctx, stager, t.region.alloc, t.off, want)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "InternalError", "loopback: "+err.Error())
		return
	}
	defer body.Close()
	u := *s.upstream
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), body)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "InternalError", "loopback: "+err.Error())
		return
	}
	out.Header = r.Header.Clone()
	for _, k := range append(hopHeaders, "Content-Length", "Expect") {
		out.Header.Del(k)
	}
	// Content-Length is not among the signed headers of a request that had
	// none, and the payload is unsigned: the signature holds for the body.
	out.ContentLength = want
	if want == 0 {
		out.Body = http.NoBody
	}
	out.Host = r.Host
	resp, err := s.upstreamTransport.RoundTrip(out)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "InternalError",
			fmt.Sprintf("loopback: RDMA read of %d bytes failed: %v", want, err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		relay(w, resp)
		return
	}
	io.Copy(io.Discard, resp.Body)
	s.f.count(func(st *Stats) {
		st.Served++
		st.PutsServed++
		st.ServedBytes += want
		if want < int64(t.token.Size) {
			st.Short++
		}
	})
	writeRDMAReply(w, resp, want)
}

// writeRDMAReply answers as an RDMA-serving server does: the upstream
// reply's headers and status, the bytes moved over the fabric in the RDMA
// headers, and no body.
func writeRDMAReply(w http.ResponseWriter, resp *http.Response, moved int64) {
	h := w.Header()
	copyHeader(h, resp.Header)
	h.Set(replyHeader, strconv.Itoa(resp.StatusCode))
	h.Set(bytesHeader, strconv.FormatInt(moved, 10))
	h.Set("Content-Length", "0")
	h.Del("Content-Type")
	w.WriteHeader(resp.StatusCode)
}

// deviceReader reads n bytes of an allocation from off, one staging slot
// at a time: the device-to-host copy an RDMA NIC would make. The HTTP
// transport may read it from its own goroutine and close it after the
// reply, so its calls hold a lock.
type deviceReader struct {
	ctx    context.Context
	alloc  cufile.Allocation
	off    uint64
	left   int64
	mu     sync.Mutex
	copier cufile.Copier
}

func newDeviceReader(ctx context.Context, stager cufile.Stager, alloc cufile.Allocation, off uint64, n int64) (*deviceReader, error) {
	if off > alloc.Size() || uint64(n) > alloc.Size()-off {
		return nil, fmt.Errorf("%d bytes at %d of a %d-byte allocation", n, off, alloc.Size())
	}
	c, err := stager.NewCopier()
	if err != nil {
		return nil, err
	}
	return &deviceReader{ctx: ctx, alloc: alloc, off: off, left: n, copier: c}, nil
}

func (d *deviceReader) Read(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.copier == nil:
		return 0, cufile.ErrClosed
	case d.left == 0:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	slot, err := d.copier.AcquireSlot(d.ctx)
	if err != nil {
		return 0, err
	}
	defer d.copier.ReleaseSlot(slot)
	k := int(min(int64(len(p)), int64(len(slot.Buf)), d.left))
	if err := d.copier.CopyFromDeviceAsync(d.alloc, d.off, slot, k); err != nil {
		return 0, err
	}
	if err := d.copier.Sync(); err != nil {
		return 0, err
	}
	copy(p, slot.Buf[:k])
	d.off += uint64(k)
	d.left -= int64(k)
	return k, nil
}

func (d *deviceReader) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.copier == nil {
		return nil
	}
	err := d.copier.Close()
	d.copier = nil
	return err
}

// fetch sends r to the upstream. From an http upstream a 2xx reply of known
// length comes with its body as a RawBody (resp.Body is empty); otherwise
// the body is resp.Body.
func (s *Server) fetch(ctx context.Context, r *http.Request) (*http.Response, *objstore.RawBody, error) {
	u := *s.upstream
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	out.Header = r.Header.Clone()
	for _, k := range hopHeaders {
		out.Header.Del(k)
	}
	// Host is a signed header: the upstream must see the one the client
	// signed.
	out.Host = r.Host
	if u.Scheme != "http" {
		resp, err := s.upstreamTransport.RoundTrip(out)
		return resp, nil, err
	}
	return s.conns.Send(ctx, out, dial, 0)
}

// dial opens the fabric's upstream connections.
var dial = objstore.TCPDialer(&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second})

// hopHeaders are a connection's own, never forwarded (RFC 9110, 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
}

// relay passes an upstream reply through unchanged.
func relay(w http.ResponseWriter, resp *http.Response) {
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// rawReader reads a RawBody as io.ReadFull asks: every read fills p, up to
// what the body has left.
type rawReader struct{ b *objstore.RawBody }

func (r rawReader) Read(p []byte) (int, error) {
	k := min(int64(len(p)), r.b.Left())
	if k == 0 {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	if err := r.b.ReadFull(p[:k]); err != nil {
		return 0, err
	}
	return int(k), nil
}

// write copies n bytes of body into alloc at off through a copier of the
// device's stager, and returns once the copies have completed: the reply
// may go only once the bytes are in the buffer.
func (s *Server) write(ctx context.Context, alloc cufile.Allocation, off uint64, body io.Reader, n int64) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	stager, err := s.stagers(alloc.Device())
	if err != nil {
		return 0, err
	}
	return cufile.CopyFrom(ctx, stager, body, n, alloc, off)
}

// Listen serves on 127.0.0.1 at a free port and returns the endpoint URL.
func (s *Server) Listen() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), nil
}

// Close stops serving and ends requests in progress (stalled ones too).
func (s *Server) Close() error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Close()
	s.upstreamTransport.CloseIdleConnections()
	s.conns.CloseIdle()
	return err
}

// s3Error is an S3 error body.
type s3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string
	Message   string
	Resource  string
	RequestID string `xml:"RequestId"`
}

func errorBody(r *http.Request, code, msg string) []byte {
	b, _ := xml.Marshal(s3Error{Code: code, Message: msg, Resource: r.URL.Path, RequestID: "loopback"})
	return append([]byte(xml.Header), b...)
}

func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	body := errorBody(r, code, msg)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
