package objstore

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// rawGetAll reads [off, off+n) of key through GetRaw and returns the local
// address its connection had.
func rawGetAll(t *testing.T, m *Minio, bucket, key string, off, n int64, v Version) ([]byte, string) {
	t.Helper()
	b, err := m.GetRaw(context.Background(), bucket, key, off, n, v)
	if err != nil {
		t.Fatalf("GetRaw(%d, %d): %v", off, n, err)
	}
	local := b.conn.LocalAddr().String()
	got, err := drainRaw(t, b)
	b.Close()
	if err != nil {
		t.Fatalf("GetRaw(%d, %d): body: %v", off, n, err)
	}
	return got, local
}

// A body read to its end leaves its connection for the next GET; one given
// up early, or broken, does not, and the GETs after it still get the
// object's bytes.
func TestGetRawKeepsConnectionsOfBodiesReadToTheEnd(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "keep")
	const size, seed = 3<<20 + 11, 71
	srv.PutRandomObject(t, "keep", "obj", size, seed)
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ctx := context.Background()
	obj, err := m.Stat(ctx, "keep", "obj")
	if err != nil {
		t.Fatal(err)
	}
	check := func(got []byte, off int64) {
		t.Helper()
		if !bytes.Equal(got, testenv.RandomBytes(seed, off, len(got))) {
			t.Fatalf("%d bytes at %d: not the object's", len(got), off)
		}
	}
	got, first := rawGetAll(t, m, "keep", "obj", 0, size, obj.Version)
	check(got, 0)
	got, second := rawGetAll(t, m, "keep", "obj", 1000, 1<<20, obj.Version)
	check(got, 1000)
	if second != first {
		t.Fatalf("second GET on %s, not on the first's kept connection %s", second, first)
	}

	// Given up half way: the connection still carries the rest, and goes.
	b, err := m.GetRaw(ctx, "keep", "obj", 0, size, obj.Version)
	if err != nil {
		t.Fatal(err)
	}
	if b.conn.LocalAddr().String() != first {
		t.Fatalf("third GET on %s, not on the kept %s", b.conn.LocalAddr(), first)
	}
	half := make([]byte, size/2)
	if err := b.ReadFull(half); err != nil {
		t.Fatal(err)
	}
	check(half, 0)
	b.Close()
	got, fourth := rawGetAll(t, m, "keep", "obj", 5, 2<<20, obj.Version)
	check(got, 5)
	if fourth == first {
		t.Fatalf("the GET after a body given up half way went on its connection %s", first)
	}

	// Aborted after its last byte was taken: not kept either.
	b, err = m.GetRaw(ctx, "keep", "obj", 0, 4096, obj.Version)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReadFull(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	b.Abort()
	broken := b.conn.LocalAddr().String()
	b.Close()
	got, fifth := rawGetAll(t, m, "keep", "obj", 0, 4096, obj.Version)
	check(got, 0)
	if fifth == broken {
		t.Fatalf("the GET after a broken body went on its connection %s", broken)
	}

	// Closed when the client is done with the endpoint, as net/http's are.
	m.CloseIdleConnections()
	got, sixth := rawGetAll(t, m, "keep", "obj", 0, 4096, obj.Version)
	check(got, 0)
	if sixth == fifth {
		t.Fatalf("a GET after CloseIdleConnections went on the kept connection %s", fifth)
	}
}

// closingServer accepts connections and closes each: at once, or after
// reading one request's headers, as a server that closed a kept connection
// before or as the next request came does.
func closingServer(t *testing.T, afterRequest bool) (addr string, requests chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	requests = make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if afterRequest {
				if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					requests <- req.URL.Path
				}
			}
			c.Close()
		}
	}()
	return ln.Addr().String(), requests
}

// A GET sent on a kept connection that the server has closed, while it was
// idle or as the request came, goes again on a new connection, and its
// bytes are the object's.
func TestGetRawSendsAgainWhenAKeptConnectionWasClosed(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "stale")
	const size, seed = 1<<20 + 3, 73
	srv.PutRandomObject(t, "stale", "obj", size, seed)
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	obj, err := m.Stat(context.Background(), "stale", "obj")
	if err != nil {
		t.Fatal(err)
	}
	for _, afterRequest := range []bool{false, true} {
		addr, requests := closingServer(t, afterRequest)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if !afterRequest {
			// Wait for the close to arrive, as it would while idle.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if k, err := c.Read(make([]byte, 1)); k != 0 || err == nil {
				t.Fatalf("the closing server sent %d bytes, %v", k, err)
			}
			c.SetReadDeadline(time.Time{})
		}
		// Kept as a connection to the store, as the daemon's would be.
		m.rawConns.put(srv.Host, c.(*net.TCPConn))
		got, local := rawGetAll(t, m, "stale", "obj", 0, size, obj.Version)
		if !bytes.Equal(got, testenv.RandomBytes(seed, 0, size)) {
			t.Fatalf("after request %v: %d bytes, not the object's", afterRequest, len(got))
		}
		if local == c.LocalAddr().String() {
			t.Fatalf("after request %v: the body came on the closed connection", afterRequest)
		}
		select {
		case p := <-requests:
			if !afterRequest || p != "/stale/obj" {
				t.Fatalf("after request %v: the closed connection was sent %q", afterRequest, p)
			}
		default:
			if afterRequest {
				t.Fatal("the connection closed as the request went was never sent it")
			}
		}
	}
}
