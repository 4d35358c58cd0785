package testenv

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
)

// RandomData returns size bytes of deterministic pseudo-random content for
// seed. Any byte range can be regenerated on its own (it implements
// io.ReaderAt), so tests can check reads at arbitrary offsets of huge
// objects without keeping them in memory.
func RandomData(size, seed int64) *io.SectionReader {
	return io.NewSectionReader(randomStream{key: splitmix64(uint64(seed))}, 0, size)
}

// RandomBytes returns bytes [off, off+n) of RandomData(_, seed).
func RandomBytes(seed, off int64, n int) []byte {
	p := make([]byte, n)
	randomStream{key: splitmix64(uint64(seed))}.ReadAt(p, off)
	return p
}

// RandomSHA256 returns the hex sha256 of RandomData(size, seed).
func RandomSHA256(size, seed int64) string {
	h := sha256.New()
	if _, err := io.CopyBuffer(h, RandomData(size, seed), make([]byte, 1<<20)); err != nil {
		panic(err) // reading generated data cannot fail
	}
	return hex.EncodeToString(h.Sum(nil))
}

// randomStream is an endless counter-based stream: 8-byte word i is a
// hash of (key, i), which makes random access as cheap as sequential.
type randomStream struct{ key uint64 }

const golden = 0x9e3779b97f4a7c15

func (r randomStream) word(i uint64) uint64 { return splitmix64(r.key + i*golden) }

func (r randomStream) ReadAt(p []byte, off int64) (int, error) {
	n := len(p)
	i := uint64(off) / 8
	if skip := int(uint64(off) % 8); skip != 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.word(i))
		c := copy(p, w[skip:])
		p = p[c:]
		i++
	}
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, r.word(i))
		p = p[8:]
		i++
	}
	if len(p) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.word(i))
		copy(p, w[:])
	}
	return n, nil
}

func splitmix64(x uint64) uint64 {
	x += golden
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
