package main

import (
	"strings"
	"testing"
)

func TestNamesObjectsAreSeededSmallAndUnderOnePrefix(t *testing.T) {
	a, b := namesObjects(500), namesObjects(500)
	keys := map[string]bool{}
	for i, o := range a {
		if o != b[i] {
			t.Fatalf("object %d differs between two calls: %+v, %+v", i, o, b[i])
		}
		if o.Size < namesMinSize || o.Size > namesMaxSize {
			t.Errorf("%s: size %d outside %d-%d", o.Key, o.Size, namesMinSize, namesMaxSize)
		}
		if !strings.HasPrefix(o.Key, namesPrefix+"/") || strings.Count(o.Key, "/") != 1 {
			t.Errorf("%s: not directly under %s/", o.Key, namesPrefix)
		}
		keys[o.Key] = true
	}
	if len(keys) != len(a) {
		t.Errorf("%d distinct keys for %d objects", len(keys), len(a))
	}
}

func TestNamesTableSaysWhichStepFailed(t *testing.T) {
	r := &namesReport{Targets: []namesTarget{
		{Name: "s3gdsfs", Status: "measured", Phases: []namesPhase{{Phase: "ls cold", Seconds: 1}, {Phase: "epoch cold", Seconds: 2, FilesPerSec: 5}}},
		{Name: "s3fs", Status: "failed", Reason: "epoch cold: small/f00001.bin: sha256 x, want y", Phases: []namesPhase{{Phase: "epoch cold", Error: "sha256 x, want y"}}},
	}}
	if !r.failed() {
		t.Fatal("a failed target does not fail the report")
	}
	table := r.table()
	if !strings.Contains(table, "FAILED: epoch cold: small/f00001.bin") {
		t.Errorf("table does not name the failure:\n%s", table)
	}
	if strings.Contains(table, "every epoch read every file") {
		t.Errorf("table claims every file checked on a failed run:\n%s", table)
	}
}
