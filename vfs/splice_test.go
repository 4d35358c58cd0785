package vfs

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// rawMemStore serves GetRaw from memStore's objects over a real loopback
// TCP connection, as a server's socket would.
type rawMemStore struct {
	*memStore
	t *testing.T
}

func (r rawMemStore) GetRaw(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (*objstore.RawBody, error) {
	r.mu.Lock()
	data := r.objects[bucket+"/"+key][off : off+n]
	r.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(data)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	r.t.Cleanup(func() { c.Close() })
	// Some bytes arrive with the headers, as from an HTTP reply.
	head := make([]byte, 1000)
	if _, err := c.Read(head[:1]); err != nil {
		return nil, err
	}
	return objstore.NewRawBody(c.(*net.TCPConn), head[:1], n, 0)
}

// takeFromPipe reads k bytes out of a spliced read's pipe, as go-fuse
// splices them on.
func takeFromPipe(t *testing.T, fd, k int) []byte {
	t.Helper()
	out := make([]byte, k)
	for got := 0; got < k; {
		n, err := unix.Read(fd, out[got:])
		if err != nil || n == 0 {
			t.Fatalf("pipe read after %d of %d bytes: %v", got, k, err)
		}
		got += n
	}
	return out
}

// spliceWhole serves one read of h by splicing and takes the whole reply
// out of the pipe, as go-fuse does when it moves it all.
func spliceWhole(t *testing.T, h *Handle, off int64, n int) []byte {
	t.Helper()
	fd, got, done, ok := h.SpliceRead(off, n)
	if !ok {
		t.Fatalf("read of %d bytes at %d not spliced", n, off)
	}
	b := takeFromPipe(t, fd, got)
	done()
	return b
}

// A reply go-fuse moved only in part is completed at the reader's next
// request from what is left in the pipe; reads elsewhere end the feed and
// go the ordinary way.
func TestSpliceReadCompletesShortRepliesFromThePipe(t *testing.T) {
	ms := newMemStore()
	const size = 5<<20 + 77
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	ms.put("b", "obj", data, "e1")
	f := newTestFS(t, rawMemStore{ms, t}, Config{Splice: true})
	e, err := f.Lookup(context.Background(), f.Root(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.Open(e)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.AllowSplice()

	var got []byte
	off := int64(0)
	for i := 0; off < size; i++ {
		fd, n, done, ok := h.SpliceRead(off, 1<<20)
		if !ok {
			t.Fatalf("read %d at %d: not spliced", i, off)
		}
		k := n
		if i%2 == 1 {
			k = n / 3 // go-fuse took only part of the reply
		}
		got = append(got, takeFromPipe(t, fd, k)...)
		if taken := done(); taken != k {
			t.Fatalf("read %d: done says %d bytes taken, %d were", i, taken, k)
		}
		off += int64(k)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("spliced %d bytes, not the object's", len(got))
	}
	snap, err := f.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ends := fmt.Sprint(snap["splice_ends_total"]); ends != "map[done:1]" {
		t.Errorf("splice ends %s, want one done", ends)
	}
	if b := snap["splice_bytes_total"]; b != float64(size) {
		t.Errorf("spliced bytes %v, want each byte counted once: %d", b, size)
	}

	// A second handle reads at an offset other than where its GET is: the
	// feed ends and the read goes the ordinary way, whose bytes are right.
	h2, err := f.Open(e)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	h2.AllowSplice()
	spliceWhole(t, h2, 0, 1<<20)
	if _, _, _, ok := h2.SpliceRead(3<<20, 1<<20); ok {
		t.Fatal("a read elsewhere was spliced")
	}
	buf := make([]byte, 1<<20)
	if _, err := h2.ReadAt(context.Background(), buf, 3<<20); err != nil || !bytes.Equal(buf, data[3<<20:4<<20]) {
		t.Fatalf("ordinary read after the feed ended: %v or wrong bytes", err)
	}
}
