package main

import (
	"bytes"
	"fmt"
	"io"
	"testing"

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
