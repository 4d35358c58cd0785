// Package faultproxy is an HTTP reverse proxy for tests that sits between an
// S3 client and a real S3 server (versitygw) and breaks some of the requests
// it forwards, the ways networks and overloaded servers do: connections
// reset in the middle of a body, 500 InternalError and 503 SlowDown replies,
// replies that never come or stop coming, bodies cut short under an honest
// or a lying Content-Length. Which request gets which fault is drawn from a
// seeded generator, and every fault is counted by kind.
//
// The proxy forwards the request's Host header unchanged, so SigV4
// signatures made for the proxy's address verify at the server.
package faultproxy

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is one fault.
type Kind int

const (
	None Kind = iota
	// Reset sends the headers and part of the body, then resets the
	// connection (RST).
	Reset
	// Status500 answers 500 with an InternalError XML body.
	Status500
	// Status503 answers 503 with a SlowDown XML body.
	Status503
	// StallHeaders sends nothing until Config.StallFor has passed or the
	// client gives up.
	StallHeaders
	// StallBody sends the headers and part of the body, then nothing.
	StallBody
	// Truncate sends part of the body under a Content-Length that matches
	// what is sent (it contradicts Content-Range), and ends the reply
	// cleanly.
	Truncate
	// LieLength declares a Content-Length larger than the body, sends the
	// whole body, then closes the connection.
	LieLength
	// CutRequest reads part of the request's body (an upload's bytes)
	// and then resets the connection, as a link that breaks mid-upload;
	// nothing reaches the server. Not among AllKinds: it breaks writes.
	CutRequest
	// Delay holds the request for Config.StallFor (unless the client
	// leaves first) and then forwards it as it is: a slow server, no
	// fault. Not among AllKinds.
	Delay

	numKinds
)

var kindNames = [...]string{
	None:         "none",
	Reset:        "reset",
	Status500:    "status_500",
	Status503:    "status_503",
	StallHeaders: "stall_headers",
	StallBody:    "stall_body",
	Truncate:     "truncate",
	LieLength:    "lie_length",
	CutRequest:   "cut_request",
	Delay:        "delay",
}

func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// AllKinds lists every fault.
func AllKinds() []Kind {
	return []Kind{Reset, Status500, Status503, StallHeaders, StallBody, Truncate, LieLength}
}

func (k Kind) needsBody() bool {
	return k == Reset || k == StallBody || k == Truncate || k == LieLength
}

// Config tunes a Proxy.
type Config struct {
	// Seed makes the schedule reproducible (for one order of requests).
	Seed uint64
	// Rate is the probability that a matching request gets a fault.
	Rate float64
	// Kinds are drawn uniformly; nil means AllKinds.
	Kinds []Kind
	// Match selects the requests that may get faults; nil means object
	// GETs with a Range header (the read path), so lookups and listings
	// pass untouched.
	Match func(*http.Request) bool
	// StallFor is how long a stall lasts unless the client leaves first;
	// 0 means a minute. Close ends every stall at once.
	StallFor time.Duration
	// SegmentSize, when set, sends the bodies of replies without a fault
	// in writes of this many bytes, each flushed on its own and SegmentGap
	// after the last: many small packets, as a slow or distant link
	// delivers them (the gap keeps the receiver from finding several
	// queued at once, which the kernel would merge).
	SegmentSize int
	SegmentGap  time.Duration
}

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	// URL is the proxy's address, http://127.0.0.1:port.
	URL string

	upstream *url.URL
	cfg      Config
	srv      *httptest.Server
	client   *http.Client
	closed   chan struct{}
	closing  sync.Once

	rate  atomic.Uint64 // math.Float64bits of the current rate
	conns atomic.Int64  // client connections accepted

	mu       sync.Mutex
	rng      *rand.Rand
	counts   [numKinds]int64
	requests int64
	matched  int64
}

// Start runs a proxy in front of upstream (http://host:port).
func Start(upstream string, cfg Config) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q: want http://host:port", upstream)
	}
	if cfg.Kinds == nil {
		cfg.Kinds = AllKinds()
	}
	if cfg.Match == nil {
		cfg.Match = func(r *http.Request) bool { return r.Method == http.MethodGet && r.Header.Get("Range") != "" }
	}
	if cfg.StallFor <= 0 {
		cfg.StallFor = time.Minute
	}
	p := &Proxy{
		upstream: u,
		cfg:      cfg,
		closed:   make(chan struct{}),
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0xfa17)),
		client: &http.Client{
			Transport: &http.Transport{
				Proxy:               nil,
				DisableCompression:  true,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     10 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	p.SetRate(cfg.Rate)
	p.srv = httptest.NewUnstartedServer(p)
	p.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.conns.Add(1)
		}
	}
	p.srv.Start()
	p.URL = p.srv.URL
	return p, nil
}

// SetRate changes the fault probability from now on.
func (p *Proxy) SetRate(rate float64) { p.rate.Store(floatBits(rate)) }

// Close ends every stall, stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.closing.Do(func() {
		close(p.closed)
		p.srv.CloseClientConnections()
		p.srv.Close()
		p.client.CloseIdleConnections()
	})
}

// Connections is how many client connections the proxy has accepted: a
// client that keeps its connections opens few.
func (p *Proxy) Connections() int64 { return p.conns.Load() }

// Counts returns the faults injected so far by kind name, plus "requests"
// (all requests) and "matched" (those that could have had a fault).
func (p *Proxy) Counts() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int64{"requests": p.requests, "matched": p.matched}
	for k := Kind(1); k < numKinds; k++ {
		out[k.String()] = p.counts[k]
	}
	return out
}

// Injected is the number of faults injected, all kinds together.
func (p *Proxy) Injected() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for k := Kind(1); k < numKinds; k++ {
		n += p.counts[k]
	}
	return n
}

// draw picks the fault for a request and a fraction for where it strikes.
func (p *Proxy) draw(r *http.Request) (Kind, float64) {
	match := p.cfg.Match(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if !match {
		return None, 0
	}
	p.matched++
	rate := bitsFloat(p.rate.Load())
	k := None
	if rate > 0 && p.rng.Float64() < rate && len(p.cfg.Kinds) > 0 {
		k = p.cfg.Kinds[p.rng.IntN(len(p.cfg.Kinds))]
	}
	return k, p.rng.Float64()
}

func (p *Proxy) count(k Kind) {
	p.mu.Lock()
	p.counts[k]++
	p.mu.Unlock()
}

// ServeHTTP forwards one request, breaking it if the schedule says so.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k, frac := p.draw(r)
	switch k {
	case Status500:
		p.count(k)
		writeS3Error(w, r, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
		return
	case Status503:
		p.count(k)
		writeS3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
		return
	case StallHeaders:
		p.count(k)
		p.stall(r.Context().Done())
		return
	case Delay:
		p.count(k)
		if !p.wait(r.Context().Done()) {
			return
		}
		k = None
	case CutRequest:
		p.count(k)
		io.CopyN(io.Discard, r.Body, int64(float64(r.ContentLength)*frac))
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // RST, not FIN
			}
			conn.Close()
		}
		return
	}
	resp, err := p.forward(r)
	if err != nil {
		http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	// Body faults need a body of known length to break.
	if k.needsBody() && (resp.ContentLength <= 0 || resp.StatusCode/100 != 2) {
		k = None
	}
	if k == None {
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		if p.cfg.SegmentSize > 0 {
			writeSegments(w, resp.Body, p.cfg.SegmentSize, p.cfg.SegmentGap)
		} else {
			io.Copy(w, resp.Body)
		}
		return
	}
	p.count(k)
	p.breakBody(w, resp, k, frac)
}

// writeSegments copies body to w in writes of size bytes, flushing each
// and pausing gap after it.
func writeSegments(w http.ResponseWriter, body io.Reader, size int, gap time.Duration) {
	flush := http.NewResponseController(w).Flush
	buf := make([]byte, size)
	for {
		n, err := io.ReadFull(body, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil || flush() != nil {
				return
			}
			if gap > 0 {
				time.Sleep(gap)
			}
		}
		if err != nil {
			return
		}
	}
}

// forward sends r to the upstream server with its headers (Host included).
func (p *Proxy) forward(r *http.Request) (*http.Response, error) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = p.upstream.Scheme
	out.URL.Host = p.upstream.Host
	out.Host = r.Host
	if r.ContentLength == 0 {
		out.Body = nil
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	return p.client.Transport.RoundTrip(out)
}

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, h := range hopHeaders {
			if strings.EqualFold(k, h) {
				goto skip
			}
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	skip:
	}
}

// breakBody writes the upstream reply by hand on the hijacked connection,
// with the fault applied.
func (p *Proxy) breakBody(w http.ResponseWriter, resp *http.Response, k Kind, frac float64) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("faultproxy: the server does not support hijacking")
	}
	conn, bufrw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	n := resp.ContentLength
	cut := int64(frac * float64(n)) // in [0, n)
	declared, send := n, cut
	switch k {
	case Truncate:
		declared = cut
	case LieLength:
		declared, send = n+1+int64(frac*1000), n
	}
	h := resp.Header.Clone()
	for _, name := range hopHeaders {
		h.Del(name)
	}
	h.Set("Content-Length", strconv.FormatInt(declared, 10))
	h.Set("Connection", "close")
	fmt.Fprintf(bufrw, "HTTP/1.1 %d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	h.Write(bufrw)
	bufrw.WriteString("\r\n")
	io.CopyN(bufrw, resp.Body, send)
	if err := bufrw.Flush(); err != nil {
		return
	}
	switch k {
	case Reset:
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // close sends RST
		}
	case StallBody:
		p.stall(clientGone(bufrw.Reader))
	}
}

// stall waits for StallFor, the client leaving, or Close.
func (p *Proxy) stall(gone <-chan struct{}) { p.wait(gone) }

// wait waits Config.StallFor and reports whether it passed: false when the
// client left or the proxy closed first.
func (p *Proxy) wait(gone <-chan struct{}) bool {
	t := time.NewTimer(p.cfg.StallFor)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-gone:
	case <-p.closed:
	}
	return false
}

// clientGone reports when the peer closes a hijacked connection (or the
// connection is closed here).
func clientGone(r *bufio.Reader) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(io.Discard, r)
	}()
	return done
}

// writeS3Error answers with an S3 error document.
func writeS3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>faultproxy</RequestId></Error>`,
		code, msg, xmlEscape(r.URL.Path))
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "0")
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func xmlEscape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")
	return r.Replace(s)
}

func floatBits(f float64) uint64 { return math.Float64bits(f) }
func bitsFloat(b uint64) float64 { return math.Float64frombits(b) }
