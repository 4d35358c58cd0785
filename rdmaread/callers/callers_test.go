package callers

import (
	"context"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
)

// standinCallers is a Table over an engine of the host stand-in, whose
// store holds nothing.
func standinCallers(t *testing.T) *Table {
	t.Helper()
	b, err := hoststandin.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	e := rdmaread.New(nil, b, rdmaread.DefaultConfig(), m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { e.Close() })
	return New(e)
}

// A caller's process is known by its files until the last of them is
// released; a thread is counted as its process.
func TestCallersKeepAProcessUntilItsLastFileCloses(t *testing.T) {
	c := standinCallers(t)
	pid := os.Getpid()
	if got := c.tgid(pid); got != pid {
		t.Fatalf("tgid of the test's own pid: %d", got)
	}
	a, b := new(int), new(int)
	c.add(pid, a)
	c.add(pid, b)
	c.Released(a)
	if _, ok := c.files[pid]; !ok {
		t.Fatal("the process was forgotten while a file it read through was open")
	}
	c.Released(b)
	if _, ok := c.files[pid]; ok {
		t.Fatal("the process is still known after its last file closed")
	}
	var none *Table
	none.Released(a) // no GPU reads: nothing to do
}

// A request the backend cannot take is refused before anything is read:
// a device handle on the host stand-in is EINVAL.
func TestCallersRefuseADeviceHandleOnTheStandIn(t *testing.T) {
	c := standinCallers(t)
	req := abi.ReadRequest{Length: 10}
	req.IPCHandle[0] = 1
	_, err := c.Read(context.Background(), new(int), os.Getpid(), uint32(os.Geteuid()), req, "b", "k", objstore.Version{Size: 10})
	if code, ok := errno.Of(err); !ok || code != syscall.EINVAL {
		t.Fatalf("device handle on the stand-in: %v (errno %v)", err, code)
	}
	if len(c.files) != 0 {
		t.Error("a refused request registered its caller")
	}
}
