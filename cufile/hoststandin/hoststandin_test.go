package hoststandin

import (
	"github.com/s3gdsfs/s3gdsfs/cufile"

	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// standin returns a host stand-in over a fresh directory.
func standin(t *testing.T) (*hostStandin, string) {
	t.Helper()
	dir := cufiletest.ShortTempDir(t)
	b, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b.(*hostStandin), dir
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
	file := cufiletest.StandinFile(t, dir, "f", 1, 0)
	for _, d := range []string{file, filepath.Join(dir, "missing")} {
		if _, err := New(d); err == nil {
			t.Errorf("New(%s) succeeded", d)
		}
	}
}

func TestStandinImport(t *testing.T) {
	b, dir := standin(t)
	path := cufiletest.StandinFile(t, dir, "buf", 12345, 7)
	for _, name := range []string{"buf", path, "./buf"} {
		a, err := b.Import(0, cufiletest.NameHandle(name))
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
	cufiletest.StandinFile(t, dir, "buf", 100, 0)
	cufiletest.StandinFile(t, dir, "empty", 0, 0)
	outside := cufiletest.StandinFile(t, t.TempDir(), "secret", 100, 0)
	if err := os.Symlink(outside, filepath.Join(dir, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}

	var unterminated cufile.Handle
	for i := range unterminated {
		unterminated[i] = 'a'
	}
	cases := map[string]cufile.Handle{
		"empty name":         {},
		"no NUL":             unterminated,
		"missing":            cufiletest.NameHandle("nope"),
		"dot-dot":            cufiletest.NameHandle("../" + filepath.Base(dir) + "/buf"),
		"dot-dot inside":     cufiletest.NameHandle("sub/../buf"),
		"absolute outside":   cufiletest.NameHandle(outside),
		"absolute via ..":    cufiletest.NameHandle(dir + "/../" + filepath.Base(dir) + "/buf"),
		"symlink out":        cufiletest.NameHandle("link-out"),
		"directory":          cufiletest.NameHandle("sub"),
		"the directory":      cufiletest.NameHandle(dir),
		"empty file":         cufiletest.NameHandle("empty"),
		"name after garbage": cufiletest.NameHandle("\x00buf"),
	}
	for what, h := range cases {
		a, err := b.Import(0, h)
		if !errors.Is(err, cufile.ErrBadHandle) {
			t.Errorf("%s: Import = %v, %v; want ErrBadHandle", what, a, err)
		}
	}
}

func TestStandinRefusesOtherDevices(t *testing.T) {
	b, dir := standin(t)
	cufiletest.StandinFile(t, dir, "buf", 100, 0)
	for _, dev := range []int{-1, 1} {
		if _, err := b.Import(dev, cufiletest.NameHandle("buf")); !errors.Is(err, cufile.ErrNoDevice) {
			t.Errorf("Import(device %d) = %v; want ErrNoDevice", dev, err)
		}
		if _, err := b.NewStager(dev, cufile.StagerConfig{}); !errors.Is(err, cufile.ErrNoDevice) {
			t.Errorf("NewStager(device %d) = %v; want ErrNoDevice", dev, err)
		}
	}
}

func TestStandinCopyIsByteExact(t *testing.T) {
	b, dir := standin(t)
	const size, off = 3<<20 + 17, 12345
	path := cufiletest.StandinFile(t, dir, "buf", size, 0xa5)
	a, err := b.Import(0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 64 << 10, Slots: 3, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	data := cufiletest.Pattern(2<<20+999, 1)
	c := cufiletest.CopyThrough(t, st, a, off, data)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	want := bytes.Repeat([]byte{0xa5}, size)
	copy(want[off:], data)
	if got := cufiletest.FileSum(t, path); got != sha256.Sum256(want) {
		t.Fatalf("file sha256 %x, want %x", got, sha256.Sum256(want))
	}
}

func TestStandinRangeCheckedBeforeAnyByte(t *testing.T) {
	b, dir := standin(t)
	const size = 1000
	path := cufiletest.StandinFile(t, dir, "buf", size, 0x11)
	before := cufiletest.FileSum(t, path)
	a, err := b.Import(0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 4096, Slots: 2, Streams: 1})
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
		if err := c.CopyAsync(slot, tc.n, a, tc.off); !errors.Is(err, cufile.ErrOutOfRange) {
			t.Errorf("CopyAsync(n=%d, off=%d) = %v; want ErrOutOfRange", tc.n, tc.off, err)
		}
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if cufiletest.FileSum(t, path) != before {
		t.Fatal("a refused copy wrote bytes")
	}

	// The exact fit is accepted, and the refused slots came back.
	slots := make([]*cufile.Slot, 0, 2)
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
	cufiletest.StandinFile(t, dir, "buf", 100, 0)
	a, err := b.Import(0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, _ := st.NewCopier()
	defer c.Close()

	try := func(dst cufile.Allocation, want error) {
		t.Helper()
		slot, err := c.AcquireSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CopyAsync(slot, 10, dst, 0); !errors.Is(err, want) {
			t.Errorf("CopyAsync = %v; want %v", err, want)
		}
	}
	try(nil, cufile.ErrBadHandle)
	try(cufiletest.FakeAllocation{Dev: 1, Len: 100}, cufile.ErrNoDevice)
	try(cufiletest.FakeAllocation{Dev: 0, Len: 100}, cufile.ErrBadHandle) // not a stand-in mapping
	a.Close()
	try(a, cufile.ErrBadHandle)
}

// A copy still queued when its allocation is closed fails on Sync rather
// than writing into unmapped memory. Each copy waits copyDelay before it
// writes, so the Close just after it comes first unless the test was held
// up for that long on a busy machine: a try in which the copy landed
// first (and so must have succeeded) is made again.
func TestStandinCloseDuringCopyFailsSync(t *testing.T) {
	b, dir := standin(t)
	b.copyDelay = 50 * time.Millisecond
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 64, Slots: 1, Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, _ := st.NewCopier()
	defer c.Close()
	for try := range 10 {
		name := fmt.Sprintf("buf%d", try)
		path := cufiletest.StandinFile(t, dir, name, 100, 0)
		a, err := b.Import(0, cufiletest.NameHandle(name))
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
		case landed || !errors.Is(err, cufile.ErrBadHandle):
			t.Fatalf("Sync = %v, the copy landed: %v; want ErrBadHandle and nothing written", err, landed)
		}
		if err := c.Sync(); err != nil {
			t.Fatalf("second Sync = %v; the failure is reported once", err)
		}
		return
	}
	t.Fatal("in 10 tries every copy landed before its allocation was closed")
}

// A stand-in file truncated under its mapping fails the copy, not the process.
func TestStandinTruncatedFileFailsCopy(t *testing.T) {
	b, dir := standin(t)
	path := cufiletest.StandinFile(t, dir, "buf", 1<<20, 0)
	a, err := b.Import(0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	st, err := b.NewStager(0, cufile.StagerConfig{SlotSize: 4096, Slots: 1, Streams: 1})
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
	if err := c.Sync(); !errors.Is(err, cufile.ErrBadHandle) {
		t.Fatalf("Sync = %v; want ErrBadHandle", err)
	}
}

// standinModes runs f on a stand-in over a fresh directory once for each
// way of resolving names: openat2 (where the kernel has it) and the
// component-by-component walk used where it does not.
func standinModes(t *testing.T, f func(t *testing.T, b *hostStandin, dir string)) {
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			b, dir := standin(t)
			if !walk && b.walk {
				t.Skip("openat2 is unavailable here")
			}
			b.walk = walk
			f(t, b, dir)
		})
	}
}

// wantRefusal checks that err refuses an import with the errno the read
// ioctl answers; code 0 is a refusal that carries none (EBADF).
func wantRefusal(t *testing.T, what string, a cufile.Allocation, err error, code syscall.Errno) {
	t.Helper()
	if err == nil {
		a.Close()
		t.Errorf("%s: imported; want a refusal (errno %v)", what, code)
		return
	}
	got, ok := errno.Of(err)
	if !errors.Is(err, cufile.ErrBadHandle) || got != code || ok != (code != 0) {
		t.Errorf("%s: %v (errno %v); want ErrBadHandle with errno %v", what, err, got, code)
	}
}

// Every name the stand-in refuses is refused with its own errno, in both
// ways of resolving names, and nothing outside the directory is written.
func TestStandinRefusalsCarryTheirErrno(t *testing.T) {
	standinModes(t, func(t *testing.T, b *hostStandin, dir string) {
		uid := uint32(os.Geteuid())
		cufiletest.StandinFile(t, dir, "buf", 100, 0)
		cufiletest.StandinFile(t, dir, "empty", 0, 0)
		outDir := cufiletest.ShortTempDir(t)
		outside := cufiletest.StandinFile(t, outDir, "secret", 100, 0x5a)
		before := cufiletest.FileSum(t, outside)
		for _, l := range [][2]string{{outside, "link-out"}, {"buf", "alias"}, {outDir, "dirlink"}, {".", "self"}} {
			if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		cufiletest.StandinFile(t, dir, "sub/inner", 100, 0)
		if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()

		for _, tc := range []struct {
			what, name string
			code       syscall.Errno
		}{
			{"dot-dot", "../" + filepath.Base(dir) + "/buf", syscall.EXDEV},
			{"dot-dot inside", "sub/../buf", syscall.EXDEV},
			{"absolute outside", outside, syscall.EXDEV},
			{"absolute via ..", dir + "/../" + filepath.Base(dir) + "/buf", syscall.EXDEV},
			{"symlink out, last component", "link-out", syscall.ELOOP},
			{"symlink inside, last component", "alias", syscall.ELOOP},
			{"symlink to a directory outside, as a component", "dirlink/secret", syscall.ELOOP},
			{"symlink to the directory, as a component", "self/buf", syscall.ELOOP},
			{"absolute through a symlink component", dir + "/self/buf", syscall.ELOOP},
			{"directory", "sub", syscall.EINVAL},
			{"the directory", dir, syscall.EINVAL},
			{"FIFO", "fifo", syscall.EINVAL},
			{"socket", "sock", syscall.EINVAL},
			{"empty file", "empty", syscall.EINVAL},
			{"missing", "nope", 0},
			{"a file as a directory", "buf/x", 0},
		} {
			a, err := b.ImportAs(0, cufiletest.NameHandle(tc.name), uid)
			wantRefusal(t, tc.what, a, err, tc.code)
		}
		if cufiletest.FileSum(t, outside) != before {
			t.Error("the file outside the directory changed")
		}
		// A file in a subdirectory, reached through real directories, is fine.
		a, err := b.ImportAs(0, cufiletest.NameHandle("sub/inner"), uid)
		if err != nil {
			t.Fatalf("sub/inner: %v", err)
		}
		a.Close()
	})
}

// The stand-in writes only a regular file owned by the caller's uid: a
// user may not name root's files, nor another user's, nor may root name a
// user's; the owner may.
func TestStandinWritesOnlyTheCallersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to other users")
	}
	const user, other = 4201, 4202
	standinModes(t, func(t *testing.T, b *hostStandin, dir string) {
		rootFile := cufiletest.StandinFile(t, dir, "root-owned", 4096, 0x11)
		otherFile := cufiletest.StandinFile(t, dir, "others", 4096, 0x22)
		if err := os.Chown(otherFile, other, other); err != nil {
			t.Fatal(err)
		}
		sums := map[string][32]byte{rootFile: cufiletest.FileSum(t, rootFile), otherFile: cufiletest.FileSum(t, otherFile)}
		for _, tc := range []struct {
			what, name string
			uid        uint32
		}{
			{"root's file named by a user", "root-owned", user},
			{"another user's file", "others", user},
			{"a user's file named by root", "others", 0},
		} {
			a, err := b.ImportAs(0, cufiletest.NameHandle(tc.name), tc.uid)
			wantRefusal(t, tc.what, a, err, syscall.EPERM)
		}
		// Its owner imports it, and writes land in it.
		a, err := b.ImportAs(0, cufiletest.NameHandle("others"), other)
		if err != nil {
			t.Fatalf("the owner's import: %v", err)
		}
		want := cufiletest.Pattern(4096, 9)
		if err := a.(*hostAllocation).write(0, want); err != nil {
			t.Fatal(err)
		}
		a.Close()
		if cufiletest.FileSum(t, otherFile) != sha256.Sum256(want) {
			t.Error("the owner's write did not land in its file")
		}
		if cufiletest.FileSum(t, rootFile) != sums[rootFile] {
			t.Error("root's file changed")
		}
	})
}

// An import one uid opened is never handed to another: the cache keeps the
// stand-in's imports per uid, so the owner check is made for each.
func TestStandinImportCacheChecksEachUser(t *testing.T) {
	b, dir := standin(t)
	cufiletest.StandinFile(t, dir, "buf", 4096, 0)
	c := cufile.NewImportCache(b)
	defer c.Close()
	me := uint32(os.Geteuid())
	a, err := c.AcquireAs(1, me, 0, cufiletest.NameHandle("buf"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Put(a)
	got, err := c.AcquireAs(2, me+1, 0, cufiletest.NameHandle("buf"))
	wantRefusal(t, "another uid naming an open import", nil, err, syscall.EPERM)
	if got != nil {
		t.Error("the refused request got an allocation")
	}
	again, err := c.AcquireAs(3, me, 0, cufiletest.NameHandle("buf"))
	if err != nil || again != a {
		t.Fatalf("the owner's second request: %v, shared %v", err, again == a)
	}
	c.Put(again)
}

// A directory component swapped for a symlink to a directory outside while
// imports are made never moves a write outside: each import either lands
// in the file inside or is refused, and the file outside (owned by the
// caller, so only resolution protects it) stays as it was.
func TestStandinDirectorySwapRace(t *testing.T) {
	standinModes(t, func(t *testing.T, b *hostStandin, dir string) {
		uid := uint32(os.Geteuid())
		outDir := t.TempDir()
		outside := cufiletest.StandinFile(t, outDir, "buf", 4096, 0x5a)
		before := cufiletest.FileSum(t, outside)
		if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
			t.Fatal(err)
		}
		inside := cufiletest.StandinFile(t, dir, "d/buf", 4096, 0)
		if err := os.Symlink(outDir, filepath.Join(dir, "e")); err != nil {
			t.Fatal(err)
		}
		// "d" is the directory or the symlink, swapped atomically where
		// the filesystem can, else by three renames.
		swap := func() {
			d, e := filepath.Join(dir, "d"), filepath.Join(dir, "e")
			if unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, e, unix.RENAME_EXCHANGE) == nil {
				return
			}
			tmp := filepath.Join(dir, "tmp")
			os.Rename(d, tmp)
			os.Rename(e, d)
			os.Rename(tmp, e)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
					swap()
				}
			}
		}()
		data := cufiletest.Pattern(4096, 7)
		var landed, refused int
		var odd error
		for i := 0; i < 200000 && (i < 5000 || landed < 100 || refused < 100); i++ {
			a, err := b.ImportAs(0, cufiletest.NameHandle("d/buf"), uid)
			if err != nil {
				if code, _ := errno.Of(err); code != syscall.ELOOP && !errors.Is(err, syscall.ENOENT) && odd == nil {
					odd = err // reported once, after the outside file is checked
				}
				refused++
				continue
			}
			if err := a.(*hostAllocation).write(0, data); err != nil {
				t.Fatal(err)
			}
			a.Close()
			landed++
		}
		close(stop)
		<-done
		t.Logf("%d imports landed inside, %d refused", landed, refused)
		if cufiletest.FileSum(t, outside) != before {
			t.Fatal("bytes landed in the file outside the directory")
		}
		if odd != nil {
			code, _ := errno.Of(odd)
			t.Errorf("refusal %v (errno %v); want ELOOP (or ENOENT between renames)", odd, code)
		}
		if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
			t.Errorf("the directory outside holds %d entries; want only its file", len(ents))
		}
		if landed == 0 || refused == 0 {
			t.Fatalf("the swap never raced the imports (%d landed, %d refused)", landed, refused)
		}
		// Wherever "d" is now, the directory is "d" or "e" inside.
		p := inside
		if _, err := os.Lstat(p); err != nil || cufiletest.FileSum(t, p) != sha256.Sum256(data) {
			p = filepath.Join(dir, "e", "buf")
		}
		if cufiletest.FileSum(t, p) != sha256.Sum256(data) {
			t.Error("the imports that landed did not write the file inside")
		}
	})
}

// Absolute names may start with the directory as configured or as its
// symlinks resolve; only the configured path's own symlinks are followed.
func TestStandinAbsoluteNamesUnderEitherSpelling(t *testing.T) {
	real := cufiletest.ShortTempDir(t)
	cufiletest.StandinFile(t, real, "buf", 100, 0)
	link := filepath.Join(cufiletest.ShortTempDir(t), "shm")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	b, err := New(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{link + "/buf", real + "/buf", "buf"} {
		a, err := b.Import(0, cufiletest.NameHandle(name))
		if err != nil {
			t.Errorf("Import(%q): %v", name, err)
			continue
		}
		a.Close()
	}
}
