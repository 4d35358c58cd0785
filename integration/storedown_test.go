package integration

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// switchableStore is a TCP forwarder in front of the S3 server that can be
// taken down (connections refused, those open cut) and brought back on the
// same address: a store that goes away and returns.
type switchableStore struct {
	t        *testing.T
	upstream string
	addr     string
	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]bool
}

func newSwitchableStore(t *testing.T, upstream string) *switchableStore {
	s := &switchableStore{t: t, upstream: upstream, addr: "127.0.0.1:0", conns: map[net.Conn]bool{}}
	s.up()
	t.Cleanup(s.down)
	return s
}

func (s *switchableStore) up() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listening on %s again: %v", s.addr, err)
	}
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().String()
	s.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.forward(c)
		}
	}()
}

func (s *switchableStore) forward(c net.Conn) {
	u, err := net.Dial("tcp", s.upstream)
	if err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	s.conns[c], s.conns[u] = true, true
	s.mu.Unlock()
	go func() { io.Copy(u, c); u.Close() }()
	io.Copy(c, u)
	c.Close()
}

func (s *switchableStore) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		c.Close()
		delete(s.conns, c)
	}
}

// With the store down, a stat and a read fail with EIO and the daemon says
// so: a WARN line naming the operation, the key, the errno and the cause,
// not one per failed request; when the store answers again, one line says
// how many requests failed.
func TestStoreDownIsLoggedAndItsReturnToo(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "a.txt", []byte("aaaa"))
	srv.PutObject(t, "data", "b.txt", []byte("bbbb"))
	store := newSwitchableStore(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	logs := &testenv.SyncBuffer{}
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.S3.Endpoint = "http://" + store.addr
		c.Core.MetaTTL, c.Core.NegativeTTL = 0, 0 // every stat asks the store
		c.Read.Retries = 0
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	f, err := os.Open(filepath.Join(mp, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if strings.Contains(logs.String(), "S3 request failed") {
		t.Fatalf("a failure logged while the store is up:\n%s", logs.String())
	}

	store.down()
	downAt := time.Now()
	if _, err := os.Stat(filepath.Join(mp, "b.txt")); !errors.Is(err, syscall.EIO) {
		t.Errorf("stat with the store down: %v, want EIO", err)
	}
	if _, err := f.Read(make([]byte, 4)); !errors.Is(err, syscall.EIO) {
		t.Errorf("read with the store down: %v, want EIO", err)
	}
	for i := 0; i < 5; i++ {
		os.Stat(filepath.Join(mp, "b.txt"))
	}
	down := time.Since(downAt)
	var warns []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `msg="S3 request failed"`) {
			warns = append(warns, line)
		}
	}
	t.Logf("log with the store down:\n%s", strings.Join(warns, "\n"))
	if len(warns) == 0 {
		t.Fatalf("nothing logged with the store down:\n%s", logs.String())
	}
	first := warns[0]
	for _, w := range []string{`msg="S3 request failed"`, "key=data/b.txt", "errno=EIO", "connection refused"} {
		if !strings.Contains(first, w) {
			t.Errorf("the first line does not say %s: %s", w, first)
		}
	}
	if !strings.Contains(first, "op=head") && !strings.Contains(first, "op=list") {
		t.Errorf("the first line does not name a stat's request (head or list): %s", first)
	}
	// Seven operations, each one request or more: one line, and one more
	// for each interval (5s) they took at most; the rest counted.
	if limit := 1 + int(down/(5*time.Second)); len(warns) > limit {
		t.Errorf("%d lines in %s for 7 failed operations, want at most %d", len(warns), down, limit)
	}
	if len(warns) > 1 && !strings.Contains(warns[len(warns)-1], "more_failed_unlogged=") {
		t.Errorf("a later line does not count the failures left out: %s", warns[len(warns)-1])
	}

	store.up()
	if st, err := os.Stat(filepath.Join(mp, "b.txt")); err != nil || st.Size() != 4 {
		t.Fatalf("stat with the store back: %v, %v", st, err)
	}
	if !strings.Contains(logs.String(), `msg="S3 requests succeed again" failed_requests=`) {
		t.Errorf("no line when the store answered again:\n%s", logs.String())
	}
}
