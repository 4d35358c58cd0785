package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A --credentials-file that is not a regular file is refused at once with
// what it is: a FIFO without a writer would otherwise block open(2) for
// ever, with the mount saying nothing. An oversized file is refused too.
func TestCredentialsFileThatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	writeCredentials(t, big, 0o600, "[default]\naws_access_key_id = A\naws_secret_access_key = B\n"+
		strings.Repeat("# padding\n", maxCredentialsFile/10+1))

	for _, c := range []struct{ path, want string }{
		{fifo, "--credentials-file " + fifo + ": not a regular file but a FIFO (named pipe)"},
		{sock, "--credentials-file " + sock + ": not a regular file but a socket"},
		{"/dev/null", "--credentials-file /dev/null: not a regular file but a character device"},
		{dir, "--credentials-file " + dir + ": not a regular file but a directory"},
		{big, "bytes: a credentials file is at most 1048576"},
	} {
		// The loader, bounded so that a hang fails the test rather than
		// stopping it: the bound is for a hang, not a speed.
		done := make(chan error, 1)
		go func() {
			_, err := credentialsFromFile(c.path, "default")
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want %q", c.path, err, c.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the credentials loader has not returned after 20s", c.path)
		}
	}

	// The command: a usage error naming the flag, never a hang (runCLI
	// bounds it).
	r := runCLI(t, nil, "data", "/nonexistent/mp", "--endpoint", "http://127.0.0.1:1", "--credentials-file", fifo)
	if want := "--credentials-file " + fifo + ": not a regular file but a FIFO"; r.Code != exitUsage || !strings.Contains(r.Stderr, want) {
		t.Errorf("mount with a FIFO: exit %d, stderr %q; want exit %d and %q", r.Code, r.Stderr, exitUsage, want)
	}
}
