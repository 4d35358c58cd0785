package staging_test

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
)

// The stagers under test copy into host stand-in files: their bytes can be
// read back, and a file truncated under its mapping makes a copy fail.

// standin returns a host stand-in over a fresh directory.
func standin(t *testing.T) (cufile.Backend, string) {
	t.Helper()
	dir := shortTempDir(t)
	b, err := hoststandin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b, dir
}

// shortTempDir is a fresh directory with a short path, so that absolute
// names inside it fit in a handle's 63 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// standinFile creates a stand-in "allocation" of size bytes, all fill.
func standinFile(t *testing.T, dir, name string, size int, fill byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, bytes.Repeat([]byte{fill}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func nameHandle(name string) cufile.Handle {
	var h cufile.Handle
	copy(h[:], name) // the rest stays NUL
	return h
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
