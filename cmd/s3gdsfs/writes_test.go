package main

import (
	"io"
	"strings"
	"testing"
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
