package main

import (
	"bytes"
	"io"
	"testing"
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
