package objstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// RawConns sends requests written by hand and hands a reply's body over as
// a RawBody, keeping connections between requests as net/http keeps its
// own: a connection per request leaves a socket in TIME-WAIT per request,
// and at tens of GB/s in 64 MiB parts that runs a host out of ports.
type RawConns struct {
	mu      sync.Mutex
	idle    map[string][]idleConn // by host:port, most recently kept last
	perHost int
	maxIdle time.Duration
}

type idleConn struct {
	conn  *net.TCPConn
	since time.Time
}

// NewRawConns keeps up to perHost idle connections to each host, each for
// at most maxIdle.
func NewRawConns(perHost int, maxIdle time.Duration) *RawConns {
	return &RawConns{idle: make(map[string][]idleConn), perHost: perHost, maxIdle: maxIdle}
}

// DialFunc opens a new connection to host (host:port).
type DialFunc func(ctx context.Context, host string) (*net.TCPConn, error)

// TCPDialer is the DialFunc that dials TCP with d.
func TCPDialer(d *net.Dialer) DialFunc {
	return func(ctx context.Context, host string) (*net.TCPConn, error) {
		c, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			return nil, err
		}
		return c.(*net.TCPConn), nil
	}
}

// Send sends req, which has no body, to req.URL.Host on a kept connection
// or on a new one from dial, and reads the reply's headers within timeout
// (0: no bound but ctx's). A kept connection that the server has closed
// since is found only when the request is sent or its reply read: then the
// request goes again, once, on a new connection, as net/http sends it.
//
// A 2xx reply with a Content-Length comes with its body as a RawBody, and
// resp.Body is http.NoBody; the RawBody's reads wait for a byte at most
// timeout. Any other reply comes with a nil RawBody and resp.Body reading
// the reply, whose connection closing resp.Body closes.
func (p *RawConns) Send(ctx context.Context, req *http.Request, dial DialFunc, timeout time.Duration) (*http.Response, *RawBody, error) {
	host := req.URL.Host
	for {
		conn, kept := p.get(host), true
		if conn == nil {
			var err error
			if conn, err = dial(ctx, host); err != nil {
				return nil, nil, ctxErr(ctx, err)
			}
			kept = false
		}
		resp, b, replied, err := p.exchange(ctx, conn, req, timeout)
		if err == nil {
			return resp, b, nil
		}
		conn.Close()
		if !kept || replied || ctx.Err() != nil || !staleConn(err) {
			return nil, nil, err
		}
	}
}

// exchange sends req on conn and reads its reply's headers. replied
// reports whether any of the reply came back: a kept connection that failed
// before that may be one the server closed.
func (p *RawConns) exchange(ctx context.Context, conn *net.TCPConn, req *http.Request, timeout time.Duration) (resp *http.Response, b *RawBody, replied bool, err error) {
	if timeout > 0 {
		conn.SetDeadline(time.Now().Add(timeout))
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := req.Write(conn); err != nil {
		return nil, nil, false, fmt.Errorf("send: %w", ctxErr(ctx, err))
	}
	br := bufio.NewReaderSize(conn, 16<<10)
	if _, err := br.Peek(1); err != nil {
		return nil, nil, false, fmt.Errorf("reply: %w", ctxErr(ctx, err))
	}
	resp, err = http.ReadResponse(br, req)
	if err != nil {
		return nil, nil, true, fmt.Errorf("reply: %w", ctxErr(ctx, err))
	}
	n := resp.ContentLength
	if resp.StatusCode/100 != 2 || n < 0 || len(resp.TransferEncoding) > 0 {
		// Read through net/http's parsing; the connection goes with it.
		conn.SetDeadline(time.Time{})
		if timeout > 0 {
			conn.SetReadDeadline(time.Now().Add(timeout))
		}
		resp.Body = closeBoth{resp.Body, conn}
		return resp, nil, true, nil
	}
	// What the reader buffered beyond the headers is the body's start.
	head := make([]byte, min(int64(br.Buffered()), n))
	if _, err := io.ReadFull(br, head); err != nil {
		return nil, nil, true, err
	}
	if br.Buffered() > 0 {
		return nil, nil, true, ErrLongBody
	}
	conn.SetDeadline(time.Time{})
	b, err = NewRawBody(conn, head, n, timeout)
	if err != nil {
		return nil, nil, true, err
	}
	if !resp.Close {
		h := req.URL.Host
		b.keep = func(c *net.TCPConn) { p.put(h, c) }
	}
	resp.Body = http.NoBody
	return resp, b, true, nil
}

// closeBoth closes a reply's body and the connection it came on.
type closeBoth struct {
	io.ReadCloser
	conn net.Conn
}

func (c closeBoth) Close() error {
	c.ReadCloser.Close()
	return c.conn.Close()
}

// get returns a connection kept for host, or nil. One the server has closed
// since is found when the request is sent on it (Send sends it again).
func (p *RawConns) get(host string) *net.TCPConn {
	for {
		p.mu.Lock()
		list := p.idle[host]
		if len(list) == 0 {
			p.mu.Unlock()
			return nil
		}
		c := list[len(list)-1]
		p.idle[host] = list[:len(list)-1]
		p.mu.Unlock()
		if time.Since(c.since) < p.maxIdle {
			return c.conn
		}
		c.conn.Close()
	}
}

// CloseIdle closes every connection kept; those in use are kept or closed
// as their bodies end.
func (p *RawConns) CloseIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = make(map[string][]idleConn)
	p.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.conn.Close()
		}
	}
}

// put keeps conn for the next request to host, or closes it when host has
// as many kept as it may. The oldest kept are closed once idle too long.
func (p *RawConns) put(host string, conn *net.TCPConn) {
	conn.SetDeadline(time.Time{})
	p.mu.Lock()
	list := p.idle[host]
	var stale []idleConn
	for len(list) > 0 && time.Since(list[0].since) >= p.maxIdle {
		stale = append(stale, list[0])
		list = list[1:]
	}
	kept := len(list) < p.perHost
	if kept {
		list = append(list, idleConn{conn: conn, since: time.Now()})
	}
	p.idle[host] = list
	p.mu.Unlock()
	for _, c := range stale {
		c.conn.Close()
	}
	if !kept {
		conn.Close()
	}
}

// staleConn reports whether err is what a kept connection that the server
// closed before it saw the request gives: worth the request again on a new
// connection, as net/http retries it.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
