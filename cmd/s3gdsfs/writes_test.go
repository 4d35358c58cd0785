package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// The write options set the core's write configuration, and a refused
// write setting is named by its flag.
func TestWriteOptionsAndTheirRefusals(t *testing.T) {
	var mf mountFlags
	s := newOptionSet(&mf)
	_, lists, err := s.parse([]string{"--endpoint", "http://127.0.0.1:1", "/mnt", "-o", "allow_writes,allow-overwrite,write_parts=2,write_part_size=1MiB"}, io.Discard)
	for _, l := range lists {
		if err == nil {
			err = s.applyList(l)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	w := mf.Core.Writes
	if !w.Allow || !w.AllowOverwrite || w.PartsInFlight != 2 || w.PartSize != 1<<20 {
		t.Fatalf("write configuration %+v", w)
	}
	mf.Mountpoint = "/mnt"
	err = named(mf.Config.Validate(), true)
	if err == nil || !strings.Contains(err.Error(), "--write-part-size 1MiB: between 5MiB and 5GiB") {
		t.Fatalf("error %v, want one naming --write-part-size", err)
	}
	var off mountFlags
	newOptionSet(&off)
	if off.Core.Writes.Allow || off.Core.Writes.AllowOverwrite {
		t.Fatal("writes are on by default")
	}
}

// A daemon killed mid-upload leaves no object, only the multipart upload
// it never completed; the next start with the same upload journal aborts
// it.
func TestKilledDaemonsUploadIsAbortedAtNextStart(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, journal := t.TempDir(), t.TempDir()
	flags := []string{"--allow-writes", "--write-part-size", "5MiB", "--upload-journal", journal}
	var first testenv.SyncBuffer
	cmd := startMount(t, srv, mp, &first, flags...)
	f, err := os.Create(filepath.Join(mp, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 12<<20)); err != nil {
		t.Fatal(err)
	}
	uploads := func() int {
		n := 0
		for u := range srv.Client.ListIncompleteUploads(context.Background(), "data", "", true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			n++
		}
		return n
	}
	waitFor(t, "the multipart upload on the server", func() bool { return uploads() == 1 })
	cmd.Process.Kill()
	cmd.Wait()
	f.Close() // the mount is gone: ENOTCONN
	// versitygw keeps an object as a file under its bucket's directory.
	if _, err := os.Stat(filepath.Join(srv.Dir, "data", "ckpt.bin")); !os.IsNotExist(err) {
		t.Fatalf("a killed upload left an object: %v", err)
	}
	var second testenv.SyncBuffer
	startMount(t, srv, mp, &second, flags...)
	if n := uploads(); n != 0 {
		t.Fatalf("%d multipart uploads open after the next start, want 0:\n%s", n, second.String())
	}
	if !strings.Contains(second.String(), "aborted multipart uploads a stopped daemon left") {
		t.Errorf("the next start logged no abort:\n%s", second.String())
	}
}
