package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// linesAfter are the log's lines from the first that holds mark on.
func linesAfter(log, mark string) []string {
	i := strings.Index(log, mark)
	if i < 0 {
		return nil
	}
	i = strings.LastIndex(log[:i], "\n") + 1
	return strings.Split(strings.TrimSpace(log[i:]), "\n")
}

// A Ctrl-C with a file open says once, in one plain line, what the exit
// waits for, and says when it exits: no warnings, no unmount command's
// output. Without files open it says it unmounted and exits.
func TestShutdownReportsOnceAndSaysWhenItExits(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "held.txt", []byte("held\n"))

	t.Run("a file open", func(t *testing.T) {
		mp := t.TempDir()
		var stderr testenv.SyncBuffer
		cmd := startMount(t, srv, mp, &stderr)
		f, err := os.Open(filepath.Join(mp, "held.txt"))
		if err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		cmd.Process.Signal(syscall.SIGINT)
		waitFor(t, "the log of the wait", func() bool { return strings.Contains(stderr.String(), "waiting for the files still open") })
		// The holder is still served.
		b := make([]byte, 16)
		if n, err := f.Read(b); err != nil || string(b[:n]) != "held\n" {
			t.Fatalf("read of the file held open after the signal: %q, %v", b[:n], err)
		}
		f.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("exit: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("still running 30s after the last file closed:\n%s", stderr.String())
		}
		got := linesAfter(stderr.String(), "msg=unmounting")
		t.Logf("shutdown log:\n%s", strings.Join(got, "\n"))
		want := []string{"msg=unmounting signal=interrupt open_files=1", "waiting for the files still open", "the last open file closed: unmounted, exiting"}
		if len(got) != len(want) {
			t.Fatalf("%d lines from the signal to the exit, want %d", len(got), len(want))
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) || !strings.Contains(got[i], "level=INFO") {
				t.Errorf("line %d: %s; want an INFO line with %q", i+1, got[i], w)
			}
		}
		if !strings.Contains(got[1], "open_files=1") || !strings.Contains(got[1], "SIGINT or SIGTERM again exits now") {
			t.Errorf("the wait's line does not count the file and say how to exit now: %s", got[1])
		}
	})

	t.Run("no file open", func(t *testing.T) {
		mp := t.TempDir()
		var stderr testenv.SyncBuffer
		cmd := startMount(t, srv, mp, &stderr)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("exit: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("still running 30s after SIGTERM:\n%s", stderr.String())
		}
		got := linesAfter(stderr.String(), "msg=unmounting")
		if len(got) != 2 || !strings.Contains(got[1], `msg="unmounted: exiting"`) {
			t.Fatalf("want the signal's line and one saying it exits:\n%s", stderr.String())
		}
		// A host without a GPU says so in one line, without the loader's
		// words; a host with one says nothing of it.
		n := 0
		for _, line := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(line, "CUDA") || strings.Contains(line, "cuda") {
				n++
			}
		}
		if n > 1 || strings.Contains(stderr.String(), "dlopen") {
			t.Errorf("%d lines about CUDA, or the loader's words:\n%s", n, stderr.String())
		}
	})
}
