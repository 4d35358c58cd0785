package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// sizeRecorder is a reader of n bytes that notes the largest read asked of it.
type sizeRecorder struct {
	r       io.Reader
	largest int
}

func (s *sizeRecorder) Read(p []byte) (int, error) {
	s.largest = max(s.largest, len(p))
	return s.r.Read(p)
}

// A GET's body is read in reads of the buffer given, not in a copy helper's
// own small ones, and every byte is counted.
func TestDiscardReadsInTheGivenBuffer(t *testing.T) {
	const size = 9<<20 + 5
	body := &sizeRecorder{r: bytes.NewReader(make([]byte, size))}
	n, err := discard(body, make([]byte, 4<<20))
	if err != nil || n != size {
		t.Fatalf("discard: %d bytes, %v; want %d", n, err, size)
	}
	if body.largest != 4<<20 {
		t.Fatalf("largest read asked %d bytes, want the 4 MiB buffer", body.largest)
	}
}

// A run's GETs are the objects whole, or with --part every range of each
// object in order, the last range short; an empty list is an error.
func TestPlanGetsCoversEveryObjectOnce(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "plan")
	srv.PutRandomObject(t, "plan", "a", 5<<20+3, 1)
	srv.PutRandomObject(t, "plan", "b", 1<<20, 2)
	keys := []string{"a", "b"}
	whole, err := planGets(srv.Client, "plan", keys, 0)
	if err != nil || fmt.Sprint(whole) != "[{a 0 0} {b 0 0}]" {
		t.Fatalf("whole objects: %v %v", whole, err)
	}
	parts, err := planGets(srv.Client, "plan", keys, 2<<20)
	want := fmt.Sprint([]getRange{{"a", 0, 2 << 20}, {"a", 2 << 20, 4 << 20}, {"a", 4 << 20, 5<<20 + 3}, {"b", 0, 1 << 20}})
	if err != nil || fmt.Sprint(parts) != want {
		t.Fatalf("2 MiB parts: %v %v, want %s", parts, err, want)
	}
	if _, err := planGets(srv.Client, "plan", nil, 0); err == nil {
		t.Fatal("no keys: no error")
	}
	if _, err := planGets(srv.Client, "plan", []string{"missing"}, 1<<20); err == nil {
		t.Fatal("a missing key with --part: no error")
	}
}

// The device sink lands a body byte for byte in its worker's buffer through
// the stager's slots (here the host stand-in's, whose "device memory" is a
// mapped file), refuses a body larger than the buffer, and with copy off
// fills slots without touching the buffer.
func TestDeviceSinkLandsEveryByte(t *testing.T) {
	for _, cfg := range []cufile.StagerConfig{
		{SlotSize: deviceSlotSize, Slots: 4, Streams: 2},
		{SlotSize: 64 << 10, Slots: 5, Streams: 1},
	} {
		t.Run(fmt.Sprintf("slots_%d_x%d", cfg.SlotSize, cfg.Slots), func(t *testing.T) { deviceSinkLandsEveryByte(t, cfg) })
	}
}

func deviceSinkLandsEveryByte(t *testing.T, cfg cufile.StagerConfig) {
	dir := t.TempDir()
	const bufSize = 16 << 20
	if err := os.WriteFile(filepath.Join(dir, "buf"), make([]byte, bufSize), 0o600); err != nil {
		t.Fatal(err)
	}
	backend, err := hoststandin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var h cufile.Handle
	copy(h[:], "buf")
	alloc, err := backend.Import(0, h)
	if err != nil {
		t.Fatal(err)
	}
	st, err := backend.NewStager(0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sink := &deviceSink{stager: st, bufs: []cufile.Allocation{alloc}, toDevice: true}
	defer func() {
		if err := sink.Close(); err != nil {
			t.Error(err)
		}
	}()
	body := make([]byte, 9<<20+5)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	n, err := sink.read(0, bytes.NewReader(body))
	if err != nil || n != int64(len(body)) {
		t.Fatalf("read: %d bytes, %v; want %d", n, err, len(body))
	}
	landed, err := os.ReadFile(filepath.Join(dir, "buf"))
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(landed[:len(body)]) != sha256.Sum256(body) {
		t.Fatal("the buffer does not hold the body")
	}
	if sha256.Sum256(landed[len(body):]) != sha256.Sum256(make([]byte, bufSize-len(body))) {
		t.Fatal("bytes written past the body")
	}
	sink.toDevice = false
	if n, err := sink.read(0, bytes.NewReader(make([]byte, 5<<20))); err != nil || n != 5<<20 {
		t.Fatalf("copy off: %d bytes, %v", n, err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "buf"))
	if sha256.Sum256(after[:len(body)]) != sha256.Sum256(body) {
		t.Fatal("copy off wrote to the buffer")
	}
	sink.toDevice = true
	if _, err := sink.read(0, bytes.NewReader(make([]byte, bufSize+1))); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a body larger than the buffer: %v", err)
	}
}

// A staging shape out of range is refused before anything is opened, with
// the flag named.
func TestDeviceShapeFlagsNameTheFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--slot-size", "1000"}, "--slot-size 1000"},
		{[]string{"--copy-streams", "-1"}, "--copy-streams -1"},
	} {
		err := get(append([]string{"--endpoint", "http://127.0.0.1:1", "--bucket", "b", "--keys", "a", "--device", "0"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}

// --device without a CUDA driver says which flag failed and why.
func TestDeviceWithoutDriverNamesTheFlag(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has a GPU")
	}
	srv := testenv.Start(t)
	srv.CreateBucket(t, "dev")
	srv.PutRandomObject(t, "dev", "a", 1<<20, 1)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	err := get([]string{"--endpoint", srv.Endpoint, "--bucket", "dev", "--keys", "a", "--device", "0", "--seconds", "0.1"})
	if err == nil || !strings.Contains(err.Error(), "--device 0") || !errors.Is(err, cufile.ErrNoDriver) {
		t.Fatalf("--device 0 without CUDA: %v", err)
	}
}
