package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/metrics"
)

// drainRaw splices the whole body through a small non-blocking pipe (so
// that it fills and SpliceTo returns short), every other step copying a
// piece with ReadFull instead, and returns what came out.
func drainRaw(t *testing.T, b *RawBody) ([]byte, error) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	var out bytes.Buffer
	buf := make([]byte, 1<<20)
	for step := 0; b.Left() > 0; step++ {
		if step%2 == 1 {
			piece := make([]byte, min(b.Left(), 100_000))
			if err := b.ReadFull(piece); err != nil {
				return out.Bytes(), err
			}
			out.Write(piece)
			continue
		}
		_, err := b.SpliceTo(p[1], int(min(b.Left(), 1<<20)))
		for {
			k, rerr := unix.Read(p[0], buf)
			if k <= 0 || rerr != nil {
				break
			}
			out.Write(buf[:k])
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
	return out.Bytes(), nil
}

// A raw GET carries exactly the bytes of the range, whole object or part,
// through the socket and a pipe, and the metered layer counts them as it
// counts ranged GETs.
func TestGetRawSplicesExactlyTheRange(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "raw")
	const size, seed = 5<<20 + 123, 61
	srv.PutRandomObject(t, "raw", "dir/obj one.bin", size, seed)
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ms := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	store := Metered{Inner: m, M: ms}
	ctx := context.Background()
	obj, err := store.Stat(ctx, "raw", "dir/obj one.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ off, n int64 }{{0, size}, {777, 3<<20 + 5}, {size - 1, 1}} {
		b, err := store.GetRaw(ctx, "raw", "dir/obj one.bin", r.off, r.n, obj.Version)
		if err != nil {
			t.Fatalf("GetRaw(%d, %d): %v", r.off, r.n, err)
		}
		got, err := drainRaw(t, b)
		b.Close()
		if err != nil {
			t.Fatalf("GetRaw(%d, %d): body: %v", r.off, r.n, err)
		}
		if !bytes.Equal(got, testenv.RandomBytes(seed, r.off, int(r.n))) {
			t.Fatalf("GetRaw(%d, %d): %d bytes, not the object's", r.off, r.n, len(got))
		}
	}
	snap, err := ms.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(size + 3<<20 + 5 + 1); snap["s3_received_bytes_total"] != want {
		t.Errorf("bytes received %v, want %v", snap["s3_received_bytes_total"], want)
	}
	if snap["bytes_in_flight"] != 0.0 {
		t.Errorf("bytes in flight %v after every body was read", snap["bytes_in_flight"])
	}
	sum := sha256.Sum256(testenv.RandomBytes(seed, 0, size))
	if hex.EncodeToString(sum[:]) != testenv.RandomSHA256(size, seed) {
		t.Fatal("test data generator disagrees with itself")
	}
}

// A raw GET is pinned like a ranged GET: another version, a missing key
// and wrong credentials are the package's errors; a TLS endpoint is
// refused before anything is sent.
func TestGetRawRefusesWhatGetRangeRefuses(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "raw")
	srv.PutRandomObject(t, "raw", "obj", 1<<20, 3)
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ctx := context.Background()
	obj, err := m.Stat(ctx, "raw", "obj")
	if err != nil {
		t.Fatal(err)
	}
	other := obj.Version
	other.ETag = "0123456789abcdef0123456789abcdef"
	if _, err := m.GetRaw(ctx, "raw", "obj", 0, obj.Size, other); !errors.Is(err, ErrChanged) {
		t.Errorf("another ETag: %v, want ErrChanged", err)
	}
	if _, err := m.GetRaw(ctx, "raw", "missing", 0, 10, obj.Version); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key: %v, want ErrNotFound", err)
	}
	bad := minioTestStore(t, srv.Endpoint, srv.AccessKey, "wrong-secret")
	if _, err := bad.GetRaw(ctx, "raw", "obj", 0, obj.Size, obj.Version); !errors.Is(err, ErrAccessDenied) {
		t.Errorf("wrong secret: %v, want ErrAccessDenied", err)
	}
	tls, err := NewMinio(Config{Endpoint: "https://127.0.0.1:1", Region: testenv.Region,
		Credentials: credentials.NewStaticV4("a", "b", "")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.GetRaw(ctx, "raw", "obj", 0, 10, obj.Version); !errors.Is(err, ErrNoRaw) {
		t.Errorf("https endpoint: %v, want ErrNoRaw", err)
	}
}

// fakeServer answers every request with the reply write makes, then
// closes (or holds) the connection.
func fakeServer(t *testing.T, write func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				c.Read(buf) // the request
				write(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// Bodies that break: one cut short ends in io.ErrUnexpectedEOF, one that
// stops coming in a timeout, one whose headers do not describe the range is
// refused before any byte is taken. None hangs.
func TestGetRawBodiesThatBreak(t *testing.T) {
	const n = 3 << 20
	// The stalled body is given up after the 500 ms ResponseTimeout,
	// long before the server would end it (which gives another error).
	const stall = 10 * time.Second
	v := Version{ETag: "abc", Size: n}
	head := func(length int) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"abc\"\r\n\r\n", length)
	}
	cases := []struct {
		name  string
		write func(c net.Conn)
		want  func(error) bool
		open  bool // the GET's headers pass, the body fails
	}{
		{"short", func(c net.Conn) { io.WriteString(c, head(n)+strings.Repeat("x", n/3)) },
			func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }, true},
		{"stall", func(c net.Conn) { io.WriteString(c, head(n)+"xyz"); time.Sleep(stall) },
			func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }, true},
		{"wrong length", func(c net.Conn) { io.WriteString(c, head(n+1)) },
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "server offered") }, false},
		{"another etag", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3145728\r\nETag: \"def\"\r\n\r\n")
		}, func(err error) bool { return errors.Is(err, ErrChanged) }, false},
		{"chunked", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"abc\"\r\n\r\n0\r\n\r\n")
		}, func(err error) bool { return err != nil && strings.Contains(err.Error(), "transfer encoding") }, false},
		{"412", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n")
		}, func(err error) bool { return errors.Is(err, ErrChanged) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ep := fakeServer(t, tc.write)
			m, err := NewMinio(Config{Endpoint: ep, Region: testenv.Region,
				Credentials: credentials.NewStaticV4("a", "b", ""), ResponseTimeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			b, err := m.GetRaw(context.Background(), "bkt", "key", 0, n, v)
			if tc.open {
				if err != nil {
					t.Fatalf("GetRaw: %v", err)
				}
				_, err = drainRaw(t, b)
				b.Close()
			}
			if !tc.want(err) {
				t.Fatalf("got %v", err)
			}
			// None waits for the stall to end; the slack over the
			// timeout is for a busy machine.
			if d := time.Since(start); d > stall/2 {
				t.Errorf("took %v", d)
			}
		})
	}
}

// A splice that waits for the rest of a request waits for it at once (the
// socket's low-water mark), and leaves the mark as it found it: a read of
// the last few bytes, with the connection kept open after them, is not
// held back waiting for more. The server sends each piece when the test
// says, so what the socket holds at each step is known.
func TestSpliceThatWaitedLeavesTheSocketReadable(t *testing.T) {
	const n = 2010
	body := testenv.RandomBytes(3, 0, n)
	b, p, next := gatedRawBody(t, body, 1000, 2000)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := b.SpliceTo(p[1], 2000)
		done <- result{got, err}
	}()
	// Nothing has come: the splice waits, for all 2000 bytes at once.
	waitFor(t, "the splice to wait for 2000 bytes", func() bool { return socketInt(t, b, "lowat") == 2000 })
	next()
	next()
	if r := <-done; r.n != 2000 || r.err != nil {
		t.Fatalf("splice of 2000 bytes that come in two pieces: %d, %v", r.n, r.err)
	}
	// It waited once for the whole, or once more if the first piece woke it.
	if w := b.Waits(); w < 1 || w > 2 {
		t.Fatalf("Waits() = %d after a splice whose bytes came in two pieces after it began, want 1 or 2", w)
	}
	out := make([]byte, 2000)
	if k, err := unix.Read(p[0], out); k != 2000 || err != nil || !bytes.Equal(out, body[:2000]) {
		t.Fatalf("pipe held %d bytes (%v), want the body's first 2000", k, err)
	}
	next()
	start := time.Now()
	last := make([]byte, 10)
	if err := b.ReadFull(last); err != nil || !bytes.Equal(last, body[2000:]) {
		t.Fatalf("the last 10 bytes: %v", err)
	}
	// Sent before the read began, they are there at once; a socket still
	// waiting for more would give up only after the body's timeout.
	if d := time.Since(start); d > gatedTimeout/2 {
		t.Errorf("the last 10 bytes took %v: the socket waited for more", d)
	}
}

// SpliceReady moves what the socket holds and never waits for more: nothing
// before the first piece has come, then that piece, then the rest.
func TestSpliceReadyTakesWhatIsThereWithoutWaiting(t *testing.T) {
	const n = 2000
	body := testenv.RandomBytes(5, 0, n)
	b, p, next := gatedRawBody(t, body, 1200)
	start := time.Now()
	if got, err := b.SpliceReady(p[1], n); got != 0 || err != nil {
		t.Fatalf("SpliceReady before the body came: %d, %v; want 0, nil", got, err)
	}
	// Nothing is sent until next: a SpliceReady that waited would wait
	// for the body's timeout.
	if d := time.Since(start); d > gatedTimeout/2 {
		t.Fatalf("SpliceReady with an empty socket took %v: it waited", d)
	}
	next()
	waitFor(t, "the first piece in the socket", func() bool { return socketInt(t, b, "queued") == 1200 })
	if got, err := b.SpliceReady(p[1], n); got != 1200 || err != nil {
		t.Fatalf("SpliceReady after the first piece: %d, %v; want 1200", got, err)
	}
	if b.Waits() != 0 {
		t.Fatalf("Waits() = %d after two SpliceReady: it must never wait", b.Waits())
	}
	next()
	if got, err := b.SpliceTo(p[1], n-1200); got != n-1200 || err != nil {
		t.Fatalf("SpliceTo of the rest: %d, %v", got, err)
	}
	out := make([]byte, n)
	if k, err := unix.Read(p[0], out); k != n || err != nil || !bytes.Equal(out, body) {
		t.Fatalf("pipe held %d bytes (%v), want the body", k, err)
	}
}

// gatedTimeout is the ResponseTimeout of gatedRawBody's GET.
const gatedTimeout = 5 * time.Second

// gatedRawBody is the raw GET body of a server that sends body in pieces
// cut at cuts, each when next is called, and keeps the connection open
// after them, as a keep-alive server does; with a non-blocking pipe to
// splice it into. Both are closed at the test's end.
func gatedRawBody(t *testing.T, body []byte, cuts ...int) (b *RawBody, p [2]int, next func()) {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	gate := make(chan struct{})
	ep := fakeServer(t, func(c net.Conn) {
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"abc\"\r\n\r\n", len(body))
		from := 0
		for _, to := range append(cuts, len(body)) {
			select {
			case <-gate:
			case <-done:
				return
			}
			c.Write(body[from:to])
			from = to
		}
		<-done
	})
	m, err := NewMinio(Config{Endpoint: ep, Region: testenv.Region,
		Credentials: credentials.NewStaticV4("a", "b", ""), ResponseTimeout: gatedTimeout})
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(body))
	b, err = m.GetRaw(context.Background(), "bkt", "key", 0, n, Version{ETag: "abc", Size: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return b, p, func() { gate <- struct{}{} }
}

// socketInt reads, from b's socket, its low-water mark ("lowat") or the
// bytes it holds unread ("queued").
func socketInt(t *testing.T, b *RawBody, what string) int {
	t.Helper()
	var v int
	var serr error
	err := b.rc.Control(func(fd uintptr) {
		if what == "lowat" {
			v, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT)
		} else {
			v, serr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		}
	})
	if err != nil || serr != nil {
		t.Fatalf("socket %s: %v %v", what, err, serr)
	}
	return v
}

// waitFor polls cond until it holds, failing the test after a deadline
// generous enough for a busy machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, still waiting for %s", what)
		}
	}
}

// RawReceiveBuffer sizes the raw GET's socket before it connects (the
// kernel reports twice what was set, its bookkeeping included); without
// it the socket keeps the system's default. Either way the bytes are the
// object's.
func TestGetRawAsksForTheReceiveBuffer(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "rcv")
	const size, seed = 3<<20 + 5, 67
	srv.PutRandomObject(t, "rcv", "obj", size, seed)
	const asked = 4 << 20
	def := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	sized, err := NewMinio(Config{Endpoint: srv.Endpoint, Region: testenv.Region, MaxRetries: 1,
		Credentials: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), RawReceiveBuffer: asked})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	obj, err := def.Stat(ctx, "rcv", "obj")
	if err != nil {
		t.Fatal(err)
	}
	rcvbuf := func(b *RawBody) int {
		var v int
		var serr error
		if err := b.rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || serr != nil {
			t.Fatalf("SO_RCVBUF: %v %v", err, serr)
		}
		return v
	}
	forced := unix.Geteuid() == 0 // SO_RCVBUFFORCE needs CAP_NET_ADMIN; without it rmem_max caps the size
	for _, tc := range []struct {
		name string
		m    *Minio
	}{{"default", def}, {"4 MiB", sized}} {
		b, err := tc.m.GetRaw(ctx, "rcv", "obj", 0, size, obj.Version)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := rcvbuf(b)
		switch {
		case tc.m == sized && forced && got < 2*asked:
			t.Errorf("%s: receive buffer %d, want %d (twice the %d asked)", tc.name, got, 2*asked, asked)
		case tc.m == def && got >= 2*asked:
			t.Errorf("%s: receive buffer %d without asking", tc.name, got)
		}
		data, err := drainRaw(t, b)
		b.Close()
		if err != nil || !bytes.Equal(data, testenv.RandomBytes(seed, 0, size)) {
			t.Fatalf("%s: %d bytes, %v: not the object's", tc.name, len(data), err)
		}
	}
}
