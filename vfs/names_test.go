package vfs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// Keys that are not valid UTF-8, as a server that URL-encodes its listings
// hands them back, are skipped with their reason, counted and logged; the
// other names list, and a lookup of such a name is ENOENT (the S3 client
// would refuse the key in every request: EIO).
func TestKeysNotUTF8AreSkipped(t *testing.T) {
	s := newMemStore()
	for _, k := range []string{"d/ok", "d/bad\xff.txt", "d/sub\xfe/inner", "d/fine/inner", "d/half\xe2\x82"} {
		s.put("b", k, []byte("x"), "e")
	}
	var logged bytes.Buffer
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	f, err := New(s, testConfig(Config{Bucket: "b"}), m, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.Lookup(context.Background(), f.Root(), "d")
	if err != nil || !d.Dir {
		t.Fatalf("lookup d: %+v %v", d, err)
	}
	if got, want := sortedNames(listAll(t, f, d)), "fine/ ok"; got != want {
		t.Fatalf("listing = %q, want %q", got, want)
	}
	if got := counterValue(t, f.m, "skipped_keys_total", skipInvalidUTF8); got != 3 {
		t.Errorf("skipped %s = %v, want 3", skipInvalidUTF8, got)
	}
	for _, key := range []string{`"d/bad\xff.txt"`, `"d/sub\xfe/"`, `"d/half\xe2\x82"`} {
		if !strings.Contains(logged.String(), "key="+key+" reason="+skipInvalidUTF8) {
			t.Errorf("no log line for key %s with reason %s in:\n%s", key, skipInvalidUTF8, logged.String())
		}
	}
	// A fresh mount, nothing listed: lookups by name do not reach the store.
	f = newTestFS(t, s, Config{})
	d, _ = f.Lookup(context.Background(), f.Root(), "d")
	for _, name := range []string{"bad\xff.txt", "sub\xfe", "half\xe2\x82"} {
		if e, err := f.Lookup(context.Background(), d, name); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("lookup %q: %+v, %v; want not found", name, e, err)
		}
	}
	if e, err := f.Lookup(context.Background(), d, "ok"); err != nil || e.Dir {
		t.Errorf("lookup ok: %+v, %v", e, err)
	}
}
