package vfs

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// pagesStore serves a fixed listing, whatever it holds: page i is asked for
// with the token strconv.Itoa(i) ("" for the first). Only List is served.
type pagesStore struct {
	objstore.Store
	pages []objstore.Page
	lists int
}

func (p *pagesStore) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (objstore.Page, error) {
	p.lists++
	i := 0
	if cont != "" {
		var err error
		if i, err = strconv.Atoi(cont); err != nil || i < 0 || i >= len(p.pages) {
			return objstore.Page{}, errors.New("no such page")
		}
	}
	return p.pages[i], nil
}

// parsePages reads a listing from text: pages split by a line "--", each
// line a common prefix ("P key") or an object ("key"); a page's line "N tok"
// sets its continuation token as sent (else the next page's number, and
// none for the last page unless some page sets one).
func parsePages(s string) []objstore.Page {
	var pages []objstore.Page
	for i, block := range strings.Split(s, "\n--\n") {
		var pg objstore.Page
		next := strconv.Itoa(i + 1)
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "P "):
				pg.Prefixes = append(pg.Prefixes, line[2:])
			case strings.HasPrefix(line, "N "):
				next = line[2:]
			default:
				pg.Objects = append(pg.Objects, objstore.Object{Key: line, Version: objstore.Version{ETag: "e", Size: int64(len(line)), LastModified: time.Unix(int64(len(line)), 0)}})
			}
		}
		pg.Next = next
		pages = append(pages, pg)
	}
	if !strings.Contains(s, "\nN ") && len(pages) > 0 {
		pages[len(pages)-1].Next = ""
	}
	return pages
}

// listPages lists dir through the decoder as the mount would, at most a
// bounded number of batches (a listing that loops ends there).
func listPages(t *testing.T, pages []objstore.Page, dirKey string) ([]Entry, error) {
	t.Helper()
	f := newTestFS(t, &pagesStore{pages: pages}, Config{})
	r := f.ReadDir(Entry{Dir: true, Bucket: "b", Key: dirKey})
	var all []Entry
	for range 1000 {
		batch, err := r.Next(context.Background())
		if err != nil || len(batch) == 0 {
			return all, err
		}
		all = append(all, batch...)
	}
	return all, nil
}

// FuzzListingDecoder: no listing a server can send panics the decoder, and
// what it shows are names the mount can hold, each once.
func FuzzListingDecoder(f *testing.F) {
	for _, seed := range []string{
		"d/a\nd/b\nP d/c/",
		"P /x",                     // gofakes3 with a key "/x": a prefix without "/"
		"P d/x\nd/x",               // a prefix without "/" beside a file of that name
		"d/\nd/a\nP d/a/\nd/a-b",   // marker, a file shadowed by a directory
		"d/a\n--\nP d/a/\n--\nd/b", // the directory on a later page
		"P d/a/\n--\nd/a\nd/a",     // the file after its directory, repeated
		"x/outside\nP y/\nd/ok",    // keys outside the prefix
		"d/a/b\nP d/a/b/\nP d/",    // slashes inside names; the prefix itself
		"d/.\nd/..\nP d/./\nP d//", // dot names, an empty segment
		"d/\x00\nP d/\xff/",        // NUL, invalid UTF-8
		"N 0\nd/loop",              // a page that hands back its own token
		"N \nd/a\n--\nd/b",         // an empty token before the last page
		"\n--\n\n--\nd/late",       // empty pages
		"d/z\nd/a\nP d/m/\nd/b",    // unsorted
		"P \nP /\nP d\n",           // empty and short prefixes
		"N 99\nd/a",                // a token for a page that does not exist
	} {
		f.Add(seed, "d/")
	}
	f.Add("P x\nx/y\nz", "")
	f.Fuzz(func(t *testing.T, listing, dirKey string) {
		entries, _ := listPages(t, parsePages(listing), dirKey)
		seen := map[string]bool{}
		for _, e := range entries {
			if reason := nameProblem(e.Name); reason != "" {
				t.Fatalf("shown %q (%s)", e.Name, reason)
			}
			if seen[e.Name] {
				t.Fatalf("%q shown twice", e.Name)
			}
			seen[e.Name] = true
			if !strings.HasPrefix(e.Key, dirKey) {
				t.Fatalf("%q: key %q outside %q", e.Name, e.Key, dirKey)
			}
			if e.Dir != strings.HasSuffix(e.Key, "/") {
				t.Fatalf("%q: dir %v, key %q", e.Name, e.Dir, e.Key)
			}
		}
	})
}

// A common prefix that does not end in "/" is skipped and counted; the rest
// of the directory lists.
func TestListingPrefixWithoutDelimiterIsSkipped(t *testing.T) {
	pages := []objstore.Page{{Prefixes: []string{"/x", "y/"}, Objects: []objstore.Object{{Key: "a", Version: objstore.Version{ETag: "e"}}}}}
	f := newTestFS(t, &pagesStore{pages: pages}, Config{})
	got := listAll(t, f, Entry{Dir: true, Bucket: "b"})
	if names(got) != "a y/" {
		t.Fatalf("listing = %q, want \"a y/\"", names(got))
	}
	if n := counterValue(t, f.m, "skipped_keys_total", skipBadPrefix); n != 1 {
		t.Fatalf("skipped bad_prefix = %v, want 1", n)
	}
}
