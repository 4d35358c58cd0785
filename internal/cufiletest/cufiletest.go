// Package cufiletest holds what the tests of cufile's backends and staging
// share: host stand-in buffers (files that stand in for device
// allocations), the handles that name them, byte patterns, and a copy of
// bytes through a stager. Only tests import it.
package cufiletest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

// ShortTempDir is a fresh directory with a short path, so that absolute
// names inside it fit in a handle's 63 bytes.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StandinFile creates a stand-in "allocation" of size bytes, all fill.
func StandinFile(t testing.TB, dir, name string, size int, fill byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, bytes.Repeat([]byte{fill}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// NameHandle is the handle that names a stand-in buffer.
func NameHandle(name string) cufile.Handle {
	var h cufile.Handle
	copy(h[:], name) // the rest stays NUL
	return h
}

// FileSum is the sha256 of the file at path.
func FileSum(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// Pattern is n bytes that depend on seed.
func Pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// CopyThrough copies data into dst at off through st's slots and waits for
// it, failing the test on any error; it returns the copier, still open.
func CopyThrough(t testing.TB, st cufile.Stager, dst cufile.Allocation, off uint64, data []byte) cufile.Copier {
	t.Helper()
	c, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 {
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := copy(slot.Buf, data)
		if err := c.CopyAsync(slot, n, dst, off); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
		off += uint64(n)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	return c
}

// FakeAllocation is an allocation of no backend's: a device and a size.
type FakeAllocation struct {
	Dev int
	Len uint64
}

func (f FakeAllocation) Device() int  { return f.Dev }
func (f FakeAllocation) Size() uint64 { return f.Len }
func (f FakeAllocation) Close() error { return nil }
