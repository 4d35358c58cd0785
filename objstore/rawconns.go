package objstore

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// rawConns keeps GetRaw's connections between GETs, as net/http keeps its
// own: a connection per GET leaves a socket in TIME-WAIT per GET, and at
// tens of GB/s in 64 MiB parts that runs a host out of ports.
type rawConns struct {
	mu      sync.Mutex
	idle    map[string][]idleConn // by host:port, most recently kept last
	perHost int
	maxIdle time.Duration
}

type idleConn struct {
	conn  *net.TCPConn
	since time.Time
}

func newRawConns(perHost int, maxIdle time.Duration) *rawConns {
	return &rawConns{idle: make(map[string][]idleConn), perHost: perHost, maxIdle: maxIdle}
}

// get returns a connection kept for host, or nil. One the server has closed
// since is found when the GET is sent on it (GetRaw sends it again).
func (p *rawConns) get(host string) *net.TCPConn {
	if p == nil {
		return nil
	}
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

// closeIdle closes every connection kept.
func (p *rawConns) closeIdle() {
	if p == nil {
		return
	}
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

// put keeps conn for the next GET to host, or closes it when host has as
// many kept as it may. The oldest kept are closed once idle too long.
func (p *rawConns) put(host string, conn *net.TCPConn) {
	if p == nil {
		conn.Close()
		return
	}
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
