package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// spotCheck compares a few bytes at the start, middle and end of a chunk
// read at off with the generator: cheap enough for timed runs, yet it
// catches zero-filled, stale or misplaced data.
func spotCheck(o object, off int64, chunk []byte) error {
	const probe = 16
	if off+int64(len(chunk)) > o.Size {
		return fmt.Errorf("%s: read past the end (offset %d, %d bytes, size %d)", o.Key, off, len(chunk), o.Size)
	}
	for _, at := range []int{0, len(chunk) / 2, len(chunk) - probe} {
		at = max(at, 0)
		n := min(probe, len(chunk)-at)
		if n <= 0 {
			continue
		}
		var want [probe]byte
		testenv.RandomData(o.Size, o.Seed).ReadAt(want[:n], off+int64(at))
		if !bytes.Equal(chunk[at:at+n], want[:n]) {
			return fmt.Errorf("%s: wrong data at offset %d", o.Key, off+int64(at))
		}
	}
	return nil
}

// hashAll reads r to the end and checks length and sha256 against o.
func hashAll(o object, r io.Reader) error {
	h := sha256.New()
	n, err := io.CopyBuffer(h, r, make([]byte, readSize))
	if err != nil {
		return fmt.Errorf("%s: %w", o.Key, err)
	}
	if n != o.Size {
		return fmt.Errorf("%s: read %d bytes, want %d", o.Key, n, o.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != o.SHA256 {
		return fmt.Errorf("%s: sha256 %s, want %s", o.Key, got, o.SHA256)
	}
	return nil
}
