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
	proxy    *httputil.ReverseProxy
	// upstreamTransport is the proxy's; Close lets its kept connections go.
	upstreamTransport *http.Transport

	mu  sync.Mutex
	srv *http.Server
}

// target is where a GET with a token writes; it rides in the request's
// context from ServeHTTP to the proxy's response hook.
type target struct {
	token  rdmatoken.Token
	region *region
	off    uint64 // in the region's allocation
	short  bool
}

type targetKey struct{}

// NewServer proxies to upstream (http://host:port) and writes through the
// stagers stagers gives.
func NewServer(f *Fabric, upstream string, stagers StagerFunc) (*Server, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("loopback: upstream %q: want http://host[:port]", upstream)
	}
	s := &Server{f: f, upstream: u, stagers: stagers}
	s.upstreamTransport = &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 64}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// Host is a signed header: the upstream must see the one the
			// client signed.
			pr.Out.Host = pr.In.Host
		},
		Transport:      s.upstreamTransport,
		ModifyResponse: s.writeIntoRegion,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, http.StatusInternalServerError, "InternalError", "loopback: "+err.Error())
		},
	}
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tokenStr := r.Header.Get(rdmatoken.Header)
	if r.Method != http.MethodGet || tokenStr == "" {
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
	s.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
	s.f.count(func(st *Stats) { st.ServeNanos += int64(time.Since(start)) })
}

// writeIntoRegion turns the upstream's body into a loopback RDMA write: the
// bytes go into the region and the reply keeps the object headers but
// carries the RDMA reply headers and no body. Replies other than 200 and
// 206 (errors, 304, 412) pass through unchanged.
func (s *Server) writeIntoRegion(resp *http.Response) error {
	t, ok := resp.Request.Context().Value(targetKey{}).(*target)
	if !ok || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent) {
		return nil
	}
	defer resp.Body.Close()
	n := resp.ContentLength
	if n < 0 {
		// Unknown length: read at most one byte past what the token holds.
		body, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.token.Size)+1))
		if err != nil {
			return err
		}
		n = int64(len(body))
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	if n > int64(t.token.Size) {
		s.f.count(func(st *Stats) { st.Rejected++ })
		return replaceWithError(resp, http.StatusBadRequest, "InvalidToken",
			fmt.Sprintf("x-amz-rdma-token names %d bytes, the range has %d", t.token.Size, n))
	}
	want := n
	if t.short {
		want = n / 2
	}
	wrote, err := s.write(resp.Request.Context(), t.region.alloc, t.off, resp.Body, want)
	if err != nil {
		return fmt.Errorf("RDMA write of %d bytes failed after %d: %w", want, wrote, err)
	}
	s.f.count(func(st *Stats) {
		st.Served++
		st.ServedBytes += wrote
		if wrote < n {
			st.Short++
		}
	})
	h := resp.Header
	h.Set(replyHeader, strconv.Itoa(resp.StatusCode))
	h.Set(bytesHeader, strconv.FormatInt(wrote, 10))
	h.Set("Content-Length", "0")
	h.Del("Content-Type")
	resp.ContentLength = 0
	resp.Body = http.NoBody
	return nil
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

// replaceWithError turns an upstream reply into an S3 error reply.
func replaceWithError(resp *http.Response, status int, code, msg string) error {
	body := errorBody(resp.Request, code, msg)
	resp.StatusCode = status
	resp.Status = fmt.Sprintf("%d %s", status, http.StatusText(status))
	resp.Header = http.Header{}
	resp.Header.Set("Content-Type", "application/xml")
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.ContentLength = int64(len(body))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}
