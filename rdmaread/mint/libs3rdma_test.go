//go:build linux

package mint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// fakeLib is the fake libs3rdma built from testdata/fakes3rdma.c, with the
// introspection functions the real library does not have.
type fakeLib struct {
	path              string
	pinned            func() int32
	refs              func() int32
	tokensOutstanding func() int32
	counter           func(name string) int64
	setFailRegister   func(fail int32)
	setFailToken      func(fail int32)
	envSeen           func() int32
}

// buildFake compiles the fake library with the given -D flags into a
// temporary directory: each test gets its own copy and its own state.
func buildFake(t *testing.T, defines ...string) *fakeLib {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the fake libs3rdma")
	}
	path := filepath.Join(t.TempDir(), "libs3rdma.so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", path}, defines...)
	args = append(args, filepath.Join("testdata", "fakes3rdma.c"), "-lpthread")
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLib{path: path}
	for name, fn := range map[string]any{
		"fake_s3rdma_pinned":             &f.pinned,
		"fake_s3rdma_refs":               &f.refs,
		"fake_s3rdma_tokens_outstanding": &f.tokensOutstanding,
		"fake_s3rdma_counter":            &f.counter,
		"fake_s3rdma_set_fail_register":  &f.setFailRegister,
		"fake_s3rdma_set_fail_token":     &f.setFailToken,
		"fake_s3rdma_env_seen":           &f.envSeen,
	} {
		sym, err := purego.Dlsym(lib, name)
		if err != nil {
			t.Fatal(err)
		}
		purego.RegisterFunc(fn, sym)
	}
	return f
}

// hostBuffer is a host stand-in allocation of size bytes: real memory at a
// real address, as the library would pin.
func hostBuffer(t *testing.T, size int) cufile.Allocation {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "buf"), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := hoststandin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var h cufile.Handle
	copy(h[:], "buf")
	a, err := b.Import(0, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func openFake(t *testing.T, f *fakeLib) *LibS3RDMA {
	t.Helper()
	l, err := OpenLibS3RDMA(LibS3RDMAConfig{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLibS3RDMABindsTheHeadersClientAPI(t *testing.T) {
	// s3rdma.h's client functions, exactly.
	want := []string{
		"s3rdma_client_init", "s3rdma_client_free", "s3rdma_client_ready",
		"s3rdma_client_nic_count", "s3rdma_client_healthy_nic_count", "s3rdma_client_report_token_failure",
		"s3rdma_client_register", "s3rdma_client_deregister",
		"s3rdma_client_get_token", "s3rdma_client_free_token", "s3rdma_client_memory_type",
	}
	var got []string
	for _, s := range (&s3rdmaAPI{}).symbols() {
		got = append(got, s.name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("bound %v\nwant  %v", got, want)
	}
	f := buildFake(t)
	l := openFake(t, f)
	for _, s := range l.api.symbols() {
		if reflect.ValueOf(s.fn).Elem().IsNil() {
			t.Errorf("%s was not bound", s.name)
		}
	}
}

func TestLibS3RDMAMintsTokensAndFreesThem(t *testing.T) {
	f := buildFake(t)
	l := openFake(t, f)
	if l.Name() != "libs3rdma" || l.Fabric() != "rdma" {
		t.Errorf("Name %q Fabric %q", l.Name(), l.Fabric())
	}
	if total, healthy := l.NICs(); total != 2 || healthy != 2 {
		t.Errorf("NICs %d %d, want 2 2", total, healthy)
	}
	a := hostBuffer(t, 8<<20)
	if l.MemoryType(a) != S3RDMAMemSystem {
		t.Errorf("memory type %d", l.MemoryType(a))
	}
	base := a.(cufile.DevicePointer).DevicePtr()
	reg, err := l.Register(a, 1<<20, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if f.pinned() != 1 || f.refs() != 1 {
		t.Fatalf("pinned %d refs %d after one Register", f.pinned(), f.refs())
	}
	var dcts []uint32
	for i := range 4 {
		s, err := reg.Token(4096, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := rdmatoken.Parse(s)
		if err != nil {
			t.Fatalf("token %d %q: %v", i, s, err)
		}
		if tok.Addr != base+1<<20+4096 || tok.Size != 1<<20 || !tok.HasGID {
			t.Fatalf("token %+v, want 1 MiB at %#x", tok, base+1<<20+4096)
		}
		dcts = append(dcts, tok.DCT)
	}
	// Ownership: every token was copied and handed back to free_token.
	if n := f.tokensOutstanding(); n != 0 {
		t.Errorf("%d tokens not freed", n)
	}
	if n := f.counter("bad_free"); n != 0 {
		t.Errorf("%d frees of tokens the library did not issue", n)
	}
	if dcts[0] == dcts[1] || dcts[0] != dcts[2] {
		t.Errorf("DCTs %x: the fake goes round its two rails", dcts)
	}
	if _, err := reg.Token(4<<20-10, 11); !errors.Is(err, ErrOutOfBounds) {
		t.Errorf("token past the registration: %v", err)
	}
	if err := reg.Release(); err != nil {
		t.Fatal(err)
	}
	if err := reg.Release(); err != nil {
		t.Fatal(err)
	}
	if f.pinned() != 0 || f.counter("deregister") != 1 {
		t.Fatalf("pinned %d, %d deregisters after Release twice", f.pinned(), f.counter("deregister"))
	}
	if _, err := reg.Token(0, 1); !errors.Is(err, ErrRegistrationFailed) {
		t.Errorf("token after Release: %v", err)
	}
}

func TestLibS3RDMAReferenceCountsPerAddress(t *testing.T) {
	f := buildFake(t)
	l := openFake(t, f)
	a := hostBuffer(t, 1<<20)
	r1, err := l.Register(a, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Register(a, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if f.pinned() != 1 || f.refs() != 2 {
		t.Fatalf("pinned %d refs %d", f.pinned(), f.refs())
	}
	calls := f.counter("register")
	if _, err := l.Register(a, 0, 4096); !errors.Is(err, ErrRegistrationFailed) {
		t.Errorf("same address, another size: %v", err)
	}
	if f.counter("register") != calls {
		t.Error("a second size at the same address reached the library")
	}
	r1.Release()
	if f.refs() != 1 {
		t.Fatalf("refs %d after one of two releases", f.refs())
	}
	if _, err := r2.Token(0, 4096); err != nil {
		t.Fatalf("the other registration stopped minting: %v", err)
	}
	r2.Release()
	if f.pinned() != 0 || f.refs() != 0 {
		t.Fatalf("pinned %d refs %d after both releases", f.pinned(), f.refs())
	}
}

func TestLibS3RDMAFailures(t *testing.T) {
	f := buildFake(t)
	l := openFake(t, f)
	a := hostBuffer(t, 1<<20)

	t.Run("registration refused by the library", func(t *testing.T) {
		f.setFailRegister(1)
		defer f.setFailRegister(0)
		if _, err := l.Register(a, 0, 4096); !errors.Is(err, ErrRegistrationFailed) {
			t.Fatalf("%v, want ErrRegistrationFailed", err)
		}
		if f.pinned() != 0 {
			t.Fatal("a failed registration is pinned")
		}
	})
	t.Run("registration refused through the environment", func(t *testing.T) {
		t.Setenv("FAKE_S3RDMA_FAIL_REGISTER", "1")
		if f.envSeen() == 0 {
			t.Skip("os.Setenv does not reach the C environment in this build")
		}
		if _, err := l.Register(a, 0, 4096); !errors.Is(err, ErrRegistrationFailed) {
			t.Fatalf("%v, want ErrRegistrationFailed", err)
		}
	})
	t.Run("minting refused", func(t *testing.T) {
		reg, err := l.Register(a, 0, 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Release()
		f.setFailToken(1)
		defer f.setFailToken(0)
		if _, err := reg.Token(0, 4096); !errors.Is(err, ErrRegistrationFailed) {
			t.Fatalf("%v, want ErrRegistrationFailed", err)
		}
		if f.tokensOutstanding() != 0 {
			t.Fatal("a token leaked")
		}
	})
	t.Run("too large and out of bounds", func(t *testing.T) {
		if _, err := l.Register(a, 0, 1<<20+1); !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("past the allocation: %v", err)
		}
		big := &sizedAlloc{size: 8 << 30}
		if _, err := l.Register(big, 0, rdmatoken.MaxRegistration+1); !errors.Is(err, ErrTooLarge) {
			t.Errorf("over rdmatoken.MaxRegistration: %v", err)
		}
		if _, err := l.Register(big, 0, 4096); !errors.Is(err, ErrRegistrationFailed) {
			t.Errorf("an allocation without a device pointer: %v", err)
		}
	})
	t.Run("failure reports move off the rail", func(t *testing.T) {
		reg, err := l.Register(a, 0, 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Release()
		s, _ := reg.Token(0, 4096)
		bad, _ := rdmatoken.Parse(s)
		reg.ReportFailure(s)
		if f.counter("failure_report") != 1 {
			t.Fatal("the failure did not reach the library")
		}
		if _, healthy := l.NICs(); healthy != 1 {
			t.Fatalf("%d healthy NICs after a failure on one of two", healthy)
		}
		for range 4 {
			s, _ := reg.Token(0, 4096)
			if tok, _ := rdmatoken.Parse(s); tok.DCT == bad.DCT {
				t.Fatalf("minted on the failed rail %x", bad.DCT)
			}
		}
	})
	if f.pinned() != 0 || f.tokensOutstanding() != 0 {
		t.Fatalf("pinned %d, tokens %d left", f.pinned(), f.tokensOutstanding())
	}
}

func TestLibS3RDMACloseReleasesEverything(t *testing.T) {
	f := buildFake(t)
	l, err := OpenLibS3RDMA(LibS3RDMAConfig{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	a := hostBuffer(t, 1<<20)
	reg, _ := l.Register(a, 0, 1<<20)
	l.Register(a, 0, 1<<20)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if f.pinned() != 0 || f.refs() != 0 {
		t.Fatalf("pinned %d refs %d after Close", f.pinned(), f.refs())
	}
	if err := reg.Release(); err != nil {
		t.Errorf("Release after Close: %v", err)
	}
	if _, err := reg.Token(0, 1); !errors.Is(err, ErrRegistrationFailed) {
		t.Errorf("Token after Close: %v", err)
	}
	if _, err := l.Register(a, 0, 1); !errors.Is(err, ErrRegistrationFailed) {
		t.Errorf("Register after Close: %v", err)
	}
	if total, _ := l.NICs(); total != -1 {
		t.Errorf("NICs after Close: %d", total)
	}
}

func TestLibS3RDMAWithTokenCache(t *testing.T) {
	f := buildFake(t)
	l := openFake(t, f)
	c := NewTokenCache(l)
	a := hostBuffer(t, 4<<20)
	for _, r := range []struct{ off, n uint64 }{{0, 1 << 20}, {1 << 20, 1 << 20}, {3 << 20, 1 << 20}, {0, 4 << 20}} {
		lease, err := c.Acquire(a, r.off, r.n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lease.Token(); err != nil {
			t.Fatal(err)
		}
		lease.Release()
	}
	if f.counter("register") != 1 || f.pinned() != 1 {
		t.Fatalf("%d registrations for four reads of one buffer", f.counter("register"))
	}
	if err := c.ReleaseAllocation(a); err != nil {
		t.Fatal(err)
	}
	if f.pinned() != 0 || f.refs() != 0 || f.tokensOutstanding() != 0 {
		t.Fatalf("pinned %d refs %d tokens %d after ReleaseAllocation", f.pinned(), f.refs(), f.tokensOutstanding())
	}
}

func TestOpenLibS3RDMAErrors(t *testing.T) {
	if _, err := OpenLibS3RDMA(LibS3RDMAConfig{Library: filepath.Join(t.TempDir(), "libs3rdma.so")}); !errors.Is(err, ErrNoMinter) {
		t.Errorf("missing library: %v", err)
	}
	f := buildFake(t)
	_, err := OpenLibS3RDMA(LibS3RDMAConfig{Library: f.path, Devices: "mlx5_missing"})
	if !errors.Is(err, ErrNoMinter) || !strings.Contains(err.Error(), "no RDMA device mlx5_missing") {
		t.Errorf("init failure: %v, want ErrNoMinter with the library's reason", err)
	}
	broken := buildFake(t, "-DFAKE_S3RDMA_NO_GET_TOKEN")
	_, err = OpenLibS3RDMA(LibS3RDMAConfig{Library: broken.path})
	if !errors.Is(err, ErrNoMinter) || !strings.Contains(err.Error(), "s3rdma_client_get_token") {
		t.Errorf("library without get_token: %v", err)
	}
}

func TestLibS3RDMAOlderLibraryWithoutRailCalls(t *testing.T) {
	f := buildFake(t, "-DFAKE_S3RDMA_OLD")
	l := openFake(t, f)
	if total, healthy := l.NICs(); total != -1 || healthy != -1 {
		t.Errorf("NICs %d %d without the calls, want -1 -1", total, healthy)
	}
	a := hostBuffer(t, 4096)
	reg, err := l.Register(a, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := reg.Token(0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	reg.ReportFailure(s) // nothing to call: must not crash
	reg.Release()
	if f.pinned() != 0 {
		t.Fatal("pinned after Release")
	}
}
