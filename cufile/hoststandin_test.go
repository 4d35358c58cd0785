package cufile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// standin returns a host stand-in over a fresh directory.
func standin(t *testing.T) (*hostStandin, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := NewHostStandin(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b.(*hostStandin), dir
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

func nameHandle(name string) Handle {
	var h Handle
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

func TestStandinDevices(t *testing.T) {
	b, _ := standin(t)
	if b.Name() != "host-standin" {
		t.Errorf("Name() = %q", b.Name())
	}
	devs, err := b.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Ordinal != 0 || devs[0].Name != "host-standin" || devs[0].TotalMem == 0 {
		t.Errorf("Devices() = %+v", devs)
	}
}

func TestNewHostStandinNeedsDirectory(t *testing.T) {
	dir := t.TempDir()
	file := standinFile(t, dir, "f", 1, 0)
	for _, d := range []string{file, filepath.Join(dir, "missing")} {
		if _, err := NewHostStandin(d); err == nil {
			t.Errorf("NewHostStandin(%s) succeeded", d)
		}
	}
}

func TestStandinImport(t *testing.T) {
	b, dir := standin(t)
	path := standinFile(t, dir, "buf", 12345, 7)
	for _, name := range []string{"buf", path, "./buf"} {
		a, err := b.Import(0, nameHandle(name))
		if err != nil {
			t.Fatalf("Import(%q): %v", name, err)
		}
		if a.Size() != 12345 || a.Device() != 0 {
			t.Errorf("Import(%q): size %d device %d", name, a.Size(), a.Device())
		}
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}

func TestStandinImportRefusesBadNames(t *testing.T) {
	b, dir := standin(t)
	standinFile(t, dir, "buf", 100, 0)
	standinFile(t, dir, "empty", 0, 0)
	outside := standinFile(t, t.TempDir(), "secret", 100, 0)
	if err := os.Symlink(outside, filepath.Join(dir, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}

	var unterminated Handle
	for i := range unterminated {
		unterminated[i] = 'a'
	}
	cases := map[string]Handle{
		"empty name":         {},
		"no NUL":             unterminated,
		"missing":            nameHandle("nope"),
		"dot-dot":            nameHandle("../" + filepath.Base(dir) + "/buf"),
		"dot-dot inside":     nameHandle("sub/../buf"),
		"absolute outside":   nameHandle(outside),
		"absolute via ..":    nameHandle(dir + "/../" + filepath.Base(dir) + "/buf"),
		"symlink out":        nameHandle("link-out"),
		"directory":          nameHandle("sub"),
		"the directory":      nameHandle(dir),
		"empty file":         nameHandle("empty"),
		"name after garbage": nameHandle("\x00buf"),
	}
	for what, h := range cases {
		a, err := b.Import(0, h)
		if !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: Import = %v, %v; want ErrBadHandle", what, a, err)
		}
	}
}

func TestStandinSymlinkInsideIsFollowed(t *testing.T) {
	b, dir := standin(t)
	standinFile(t, dir, "buf", 100, 0)
	if err := os.Symlink("buf", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	a, err := b.Import(0, nameHandle("alias"))
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
}

func TestStandinRefusesOtherDevices(t *testing.T) {
	b, dir := standin(t)
	standinFile(t, dir, "buf", 100, 0)
	for _, dev := range []int{-1, 1} {
		if _, err := b.Import(dev, nameHandle("buf")); !errors.Is(err, ErrNoDevice) {
			t.Errorf("Import(device %d) = %v; want ErrNoDevice", dev, err)
		}
		if _, err := b.NewStager(dev, StagerConfig{}); !errors.Is(err, ErrNoDevice) {
			t.Errorf("NewStager(device %d) = %v; want ErrNoDevice", dev, err)
		}
	}
}

// copyThrough copies data into dst at off through st, slot by slot, the way
// the read engine does.
func copyThrough(t *testing.T, st Stager, dst Allocation, off uint64, data []byte) Copier {
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

func TestStandinCopyIsByteExact(t *testing.T) {
	b, dir := standin(t)
	const size, off = 3<<20 + 17, 12345
	path := standinFile(t, dir, "buf", size, 0xa5)
	a, err := b.Import(0, nameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st, err := b.NewStager(0, StagerConfig{SlotSize: 64 << 10, Slots: 3, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	data := pattern(2<<20+999, 1)
	c := copyThrough(t, st, a, off, data)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	want := bytes.Repeat([]byte{0xa5}, size)
	copy(want[off:], data)
	if got := fileSum(t, path); got != sha256.Sum256(want) {
		t.Fatalf("file sha256 %x, want %x", got, sha256.Sum256(want))
	}
}

func TestStandinRangeCheckedBeforeAnyByte(t *testing.T) {
	b, dir := standin(t)
	const size = 1000
	path := standinFile(t, dir, "buf", size, 0x11)
	before := fileSum(t, path)
	a, err := b.Import(0, nameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st, err := b.NewStager(0, StagerConfig{SlotSize: 4096, Slots: 2, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := st.NewCopier()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cases := []struct {
		n   int
		off uint64
	}{
		{size + 1, 0},
		{1, size},
		{100, size - 99},
		{1, math.MaxUint64},
		{100, math.MaxUint64 - 50}, // off+n wraps around
		{4097, 0},                  // more than the slot
		{-1, 0},
	}
	for _, tc := range cases {
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for i := range slot.Buf {
			slot.Buf[i] = 0xee
		}
		if err := c.CopyAsync(slot, tc.n, a, tc.off); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("CopyAsync(n=%d, off=%d) = %v; want ErrOutOfRange", tc.n, tc.off, err)
		}
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if fileSum(t, path) != before {
		t.Fatal("a refused copy wrote bytes")
	}

	// The exact fit is accepted, and the refused slots came back.
	slots := make([]*Slot, 0, 2)
	for range 2 {
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, slot)
	}
	if err := c.CopyAsync(slots[0], 100, a, size-100); err != nil {
		t.Errorf("exact fit: %v", err)
	}
	if err := c.CopyAsync(slots[1], 0, a, size); err != nil {
		t.Errorf("empty copy at the end: %v", err)
	}
}

func TestStandinCopyRefusesOtherAllocations(t *testing.T) {
	b, dir := standin(t)
	standinFile(t, dir, "buf", 100, 0)
	a, err := b.Import(0, nameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.NewStager(0, StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, _ := st.NewCopier()
	defer c.Close()

	try := func(dst Allocation, want error) {
		t.Helper()
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CopyAsync(slot, 10, dst, 0); !errors.Is(err, want) {
			t.Errorf("CopyAsync = %v; want %v", err, want)
		}
	}
	try(nil, ErrBadHandle)
	try(fakeAllocation{device: 1, size: 100}, ErrNoDevice)
	try(fakeAllocation{device: 0, size: 100}, ErrBadHandle) // not a stand-in mapping
	a.Close()
	try(a, ErrBadHandle)
}

// A copy still queued when its allocation is closed fails on Sync rather
// than writing into unmapped memory. Each copy waits copyDelay before it
// writes, so the Close just after it comes first unless the test was held
// up for that long on a busy machine: a try in which the copy landed
// first (and so must have succeeded) is made again.
func TestStandinCloseDuringCopyFailsSync(t *testing.T) {
	b, dir := standin(t)
	b.copyDelay = 50 * time.Millisecond
	st, err := b.NewStager(0, StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, _ := st.NewCopier()
	defer c.Close()
	for try := range 10 {
		name := fmt.Sprintf("buf%d", try)
		path := standinFile(t, dir, name, 100, 0)
		a, err := b.Import(0, nameHandle(name))
		if err != nil {
			t.Fatal(err)
		}
		slot, _ := c.AcquireSlot(context.Background())
		copy(slot.Buf, bytes.Repeat([]byte{1}, 10))
		if err := c.CopyAsync(slot, 10, a, 0); err != nil {
			t.Fatal(err)
		}
		a.Close()
		err = c.Sync()
		got, _ := os.ReadFile(path)
		landed := bytes.Equal(got[:10], bytes.Repeat([]byte{1}, 10))
		switch {
		case landed && err == nil:
			continue // the copy came before the Close
		case landed || !errors.Is(err, ErrBadHandle):
			t.Fatalf("Sync = %v, the copy landed: %v; want ErrBadHandle and nothing written", err, landed)
		}
		if err := c.Sync(); err != nil {
			t.Fatalf("second Sync = %v; the failure is reported once", err)
		}
		return
	}
	t.Fatal("in 10 tries every copy landed before its allocation was closed")
}

type fakeAllocation struct {
	device int
	size   uint64
}

func (f fakeAllocation) Device() int  { return f.device }
func (f fakeAllocation) Size() uint64 { return f.size }
func (f fakeAllocation) Close() error { return nil }

// A stand-in file truncated under its mapping fails the copy, not the process.
func TestStandinTruncatedFileFailsCopy(t *testing.T) {
	b, dir := standin(t)
	path := standinFile(t, dir, "buf", 1<<20, 0)
	a, err := b.Import(0, nameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	st, err := b.NewStager(0, StagerConfig{SlotSize: 4096, Slots: 1, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, _ := st.NewCopier()
	defer c.Close()
	slot, _ := c.AcquireSlot(context.Background())
	if err := c.CopyAsync(slot, 4096, a, 8192); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Sync = %v; want ErrBadHandle", err)
	}
}
