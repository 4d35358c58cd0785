package vfs

import (
	"context"
	"sort"
	"strings"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// DirReader streams a directory page by page, so a prefix of a million keys
// is shown as it arrives rather than after the last page.
type DirReader struct {
	f    *FS
	dir  Entry
	next string // continuation token
	done bool
	// seen drops names a listing repeats when it changes between pages.
	seen map[string]struct{}
	// held is a file that a directory of the same name may still shadow: its
	// prefix "name/" sorts after keys like "name-x", possibly on a later page.
	held []Entry
	// all is what the listing has shown, kept for the listings cache;
	// noKeep once it grew past the cache's bound, or was put there.
	all    []Entry
	noKeep bool
	over   bool // the listing grew past the cache's bound
	pages  int  // LISTs sent
	// cached is the listing being served from the cache, nil otherwise.
	cached []Entry
}

// cachedBatch is how many cached entries one Next returns.
const cachedBatch = 1000

// ReadDir starts a listing of dir.
// A directory listed whole within --meta-ttl is served from that listing
// (listings.go), without a request.
func (f *FS) ReadDir(dir Entry) *DirReader {
	if ls := f.listed.get(dir.Path()); ls != nil {
		f.m.MetaCacheHits.WithLabelValues("positive").Inc()
		return &DirReader{f: f, dir: dir, done: true, cached: ls.entries}
	}
	return &DirReader{f: f, dir: dir, seen: make(map[string]struct{})}
}

// Next returns the next batch of entries; an empty batch with a nil error
// means the listing is complete.
func (d *DirReader) Next(ctx context.Context) ([]Entry, error) {
	if d.seen == nil { // from the cache
		n := min(len(d.cached), cachedBatch)
		out := d.cached[:n:n]
		d.cached = d.cached[n:]
		return out, nil
	}
	for !d.done {
		out, err := d.page(ctx)
		if err == nil {
			d.keep(out)
		}
		if err != nil || len(out) > 0 {
			return out, err
		}
	}
	out := d.held
	d.held = nil
	for _, e := range out {
		d.emitFile(e)
	}
	d.keep(out)
	if !d.noKeep {
		// Complete: the directory's names for --meta-ttl.
		d.f.listed.put(d.dir.Path(), d.all)
		d.noKeep = true // once
		d.all = nil
	}
	return out, nil
}

// keep adds shown entries to the listing to be cached.
func (d *DirReader) keep(out []Entry) {
	if d.noKeep {
		return
	}
	if len(d.all)+len(out) > d.f.listed.max {
		d.all, d.noKeep, d.over = nil, true, true
		return
	}
	d.all = append(d.all, out...)
}

func (d *DirReader) page(ctx context.Context) ([]Entry, error) {
	if d.f.isTop(d.dir) {
		d.done = true
		names, err := d.f.store.ListBuckets(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]Entry, 0, len(names))
		for _, n := range names {
			e := Entry{Name: n, Dir: true, Bucket: n}
			// Listed buckets exist: the lookups that follow a listing
			// need not check each one again.
			d.f.meta.Put(e.Path(), e)
			out = append(out, e)
		}
		return out, nil
	}
	d.pages++
	page, err := d.f.store.List(ctx, d.dir.Bucket, d.dir.Key, d.next, 0)
	if err != nil {
		d.f.log.Warn("listing failed", "bucket", d.dir.Bucket, "prefix", d.dir.Key, "err", err)
		return nil, err
	}
	if page.Next != "" && page.Next == d.next {
		// A server that hands back the token it was sent would list the
		// same page for ever: end the listing here.
		d.f.log.Warn("listing repeats its continuation token; ending it", "bucket", d.dir.Bucket, "prefix", d.dir.Key)
		page.Next = ""
	}
	d.next = page.Next
	d.done = page.Next == ""
	return d.decode(page), nil
}

// decode turns one page into the entries it shows now (files may be held
// back for a later page, see held). Whatever the server sent, it never
// fails: a key or prefix that cannot be a name here is skipped and counted.
func (d *DirReader) decode(page objstore.Page) []Entry {
	// Objects and prefixes come as two lists; merge them in key order so a
	// held file can be released as soon as the listing passes "name/".
	type item struct {
		key string
		obj *objstore.Object // nil for a common prefix
	}
	items := make([]item, 0, len(page.Objects)+len(page.Prefixes))
	for i := range page.Objects {
		items = append(items, item{key: page.Objects[i].Key, obj: &page.Objects[i]})
	}
	for _, p := range page.Prefixes {
		items = append(items, item{key: p})
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].key < items[j].key })

	var out []Entry
	for _, it := range items {
		out = d.release(out, it.key)
		if !strings.HasPrefix(it.key, d.dir.Key) {
			// Not under the listed prefix: a server off the spec.
			d.f.noteSkipped(d.dir.Bucket, it.key, skipOutsidePrefix)
			continue
		}
		name, isDir, ok := childName(d.dir.Key, it.key)
		if !ok {
			continue // the directory's own marker object
		}
		if it.obj == nil && !isDir {
			// A common prefix must end in the delimiter; one that does
			// not (a server off the spec) names neither a directory nor
			// an object.
			d.f.noteSkipped(d.dir.Bucket, it.key, skipBadPrefix)
			continue
		}
		if reason := nameProblem(name); reason != "" {
			d.f.noteSkipped(d.dir.Bucket, it.key, reason)
			continue
		}
		e := Entry{Name: name, Dir: isDir, Bucket: d.dir.Bucket, Key: it.key}
		if isDir {
			d.dropShadowed(name)
		} else {
			e.Version = it.obj.Version
		}
		if d.isDuplicate(name) {
			continue
		}
		if !isDir {
			d.held = append(d.held, e)
			continue
		}
		d.seen[name] = struct{}{}
		d.f.meta.Put(e.Path(), e)
		out = append(out, e)
	}
	return out
}

// release emits held files that no directory can shadow any more: the
// listing has passed "name/".
func (d *DirReader) release(out []Entry, key string) []Entry {
	for len(d.held) > 0 && d.held[0].Key+"/" < key {
		e := d.held[0]
		d.held = d.held[1:]
		d.emitFile(e)
		out = append(out, e)
	}
	return out
}

func (d *DirReader) emitFile(e Entry) {
	d.seen[e.Name] = struct{}{}
	d.f.meta.Put(e.Path(), e)
}

// isDuplicate says whether name was already shown or held.
func (d *DirReader) isDuplicate(name string) bool {
	if _, dup := d.seen[name]; dup {
		return true
	}
	for _, e := range d.held {
		if e.Name == name {
			return true
		}
	}
	return false
}

// dropShadowed hides a held file with the same name as a directory.
func (d *DirReader) dropShadowed(name string) {
	for i, e := range d.held {
		if e.Name == name {
			d.f.noteSkipped(e.Bucket, e.Key, skipShadowed)
			d.held = append(d.held[:i], d.held[i+1:]...)
			return
		}
	}
}
