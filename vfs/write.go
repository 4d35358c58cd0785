package vfs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// The namespace side of writes: creating, replacing, renaming and removing
// files, and directories made before anything is written under them. The
// namespace an upload or a mkdir adds is kept here until S3 shows it.

// writeState is what a mount that allows writes keeps.
type writeState struct {
	up      objstore.Uploader
	journal *journal
	gather  sync.Mutex // one writer at a time takes a part's memory (Upload.gather)

	mu   sync.Mutex
	open map[string]*Upload // uploads in progress, by Entry.Path
	dirs map[string]Entry   // directories made and still empty, by Entry.Path
}

// EnableWrites lets the core write through up (Config.Writes.Allow). With
// a journal directory set it opens this daemon's journal there.
func (f *FS) EnableWrites(up objstore.Uploader) error {
	if !f.cfg.Writes.Allow {
		return nil
	}
	w := &writeState{up: up, open: make(map[string]*Upload), dirs: make(map[string]Entry)}
	if f.cfg.Writes.Journal != "" {
		j, err := openJournal(f.cfg.Writes.Journal)
		if err != nil {
			return err
		}
		w.journal = j
	}
	f.w = w
	return nil
}

// Writable reports whether writes are allowed and enabled.
func (f *FS) Writable() bool { return f.w != nil }

// CloseWrites closes the journal; one that still names uploads in
// progress stays for the next start.
func (f *FS) CloseWrites() {
	if f.w != nil {
		f.w.journal.close()
	}
}

// pending answers a lookup of path from what is being written or was made
// here: a file being written (no version yet, so its inode number stays
// while it grows), or an empty directory made by Mkdir.
func (f *FS) pending(path string) (Entry, bool) {
	if f.w == nil {
		return Entry{}, false
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if u, ok := f.w.open[path]; ok {
		return u.Entry(), true
	}
	e, ok := f.w.dirs[path]
	return e, ok
}

// Pending lists what dir holds beside its listing: directories made and
// still empty, and files being written, by name.
func (f *FS) Pending(dir Entry) []Entry {
	if f.w == nil || !dir.Dir {
		return nil
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	var out []Entry
	for _, e := range f.w.dirs {
		if e.Bucket == dir.Bucket && parentKey(e.Key) == dir.Key {
			out = append(out, e)
		}
	}
	for _, u := range f.w.open {
		if e := u.Entry(); e.Bucket == dir.Bucket && parentKey(e.Key) == dir.Key {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// parentKey is the directory prefix holding key (a file's, or a
// directory's ending in '/').
func parentKey(key string) string {
	k := strings.TrimSuffix(key, "/")
	return k[:strings.LastIndexByte(k, '/')+1]
}

// Writing returns the upload in progress at e's name, or nil.
func (f *FS) Writing(e Entry) *Upload {
	if f.w == nil {
		return nil
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	return f.w.open[e.Path()]
}

// childEntry is the file name would be in dir, checked as a name.
func (f *FS) childEntry(dir Entry, name string) (Entry, error) {
	switch {
	case f.w == nil:
		return Entry{}, ErrReadOnly
	case !dir.Dir:
		return Entry{}, ErrNotDir
	case f.isTop(dir):
		return Entry{}, errno.New(syscall.EPERM, "the top of a mount of every bucket holds buckets only")
	}
	if p := nameProblem(name); p != "" {
		return Entry{}, errno.New(syscall.EINVAL, "the name cannot be an S3 key here: "+p)
	}
	return Entry{Name: name, Bucket: dir.Bucket, Key: dir.Key + name}, nil
}

// Create starts the upload of a new file name in dir. Without
// AllowOverwrite a name that exists as an object is refused (EEXIST).
func (f *FS) Create(ctx context.Context, dir Entry, name string) (*Upload, error) {
	e, err := f.childEntry(dir, name)
	if err != nil {
		return nil, err
	}
	if !f.cfg.Writes.AllowOverwrite {
		if _, err := f.store.Stat(ctx, e.Bucket, e.Key); err == nil {
			return nil, fmt.Errorf("%s: %w", e.Path(), ErrExists)
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return nil, err
		}
	}
	return f.startUpload(e)
}

// OpenWrite starts the upload that replaces the object e: only an open
// with O_TRUNC (trunc) may, and only with AllowOverwrite.
func (f *FS) OpenWrite(e Entry, trunc bool) (*Upload, error) {
	switch {
	case f.w == nil:
		return nil, ErrReadOnly
	case e.Dir:
		return nil, errno.New(syscall.EISDIR, "a directory")
	case !trunc:
		return nil, fmt.Errorf("%s: %w", e.Path(), ErrModify)
	case !f.cfg.Writes.AllowOverwrite:
		return nil, fmt.Errorf("%s: %w", e.Path(), ErrOverwrite)
	}
	e.Version = objstore.Version{}
	return f.startUpload(e)
}

func (f *FS) startUpload(e Entry) (*Upload, error) {
	path := e.Path()
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if _, busy := f.w.open[path]; busy {
		return nil, fmt.Errorf("%s: %w", path, ErrBusy)
	}
	u := f.newUpload(e)
	f.w.open[path] = u
	return u, nil
}

// uploadEnded takes an upload off the namespace; a completed one becomes
// the object, known to lookups at once and to the next listing of its
// directory, and directories made above it are now S3's.
func (f *FS) uploadEnded(u *Upload, e Entry, ok bool) {
	name := u.Entry()
	path := name.Path()
	f.w.mu.Lock()
	if f.w.open[path] == u {
		delete(f.w.open, path)
	}
	if ok {
		for k := parentKey(e.Key); k != ""; k = parentKey(k) {
			delete(f.w.dirs, Entry{Bucket: e.Bucket, Key: k}.Path())
		}
	}
	f.w.mu.Unlock()
	f.Forget(name.Bucket, name.Key)
	if ok {
		f.meta.Put(path, e)
	}
}

// Mkdir makes the directory name in dir. S3 has no directories: it exists
// in this mount only until something is written under it, which makes it
// S3's prefix, or until the daemon stops.
func (f *FS) Mkdir(ctx context.Context, dir Entry, name string) (Entry, error) {
	e, err := f.childEntry(dir, name)
	if err != nil {
		return Entry{}, err
	}
	if _, err := f.Lookup(ctx, dir, name); err == nil {
		return Entry{}, fmt.Errorf("%s: %w", e.Path(), ErrExists)
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return Entry{}, err
	}
	e.Dir, e.Key = true, e.Key+"/"
	f.w.mu.Lock()
	f.w.dirs[e.Path()] = e
	f.w.mu.Unlock()
	f.meta.Invalidate(e.Path())
	return e, nil
}

// Rmdir removes the directory name in dir: one made here and still empty
// goes; a prefix S3 holds is not empty (ENOTEMPTY), since S3 shows a
// prefix only while it holds something.
func (f *FS) Rmdir(ctx context.Context, dir Entry, name string) error {
	e, err := f.childEntry(dir, name)
	if err != nil {
		return err
	}
	path := Entry{Bucket: e.Bucket, Key: e.Key + "/"}.Path()
	f.w.mu.Lock()
	_, local := f.w.dirs[path]
	empty := true
	for p := range f.w.dirs {
		if strings.HasPrefix(p, path+"/") {
			empty = false
		}
	}
	for p := range f.w.open {
		if strings.HasPrefix(p, path+"/") {
			empty = false
		}
	}
	if local && empty {
		delete(f.w.dirs, path)
	}
	f.w.mu.Unlock()
	switch {
	case local && empty:
		return nil
	case !empty:
		return errno.New(syscall.ENOTEMPTY, "directory not empty")
	}
	got, err := f.Lookup(ctx, dir, name)
	switch {
	case err != nil:
		return err
	case !got.Dir:
		return ErrNotDir
	}
	return errno.New(syscall.ENOTEMPTY, "directory not empty: S3 shows a prefix only while objects are under it")
}

// Unlink deletes the object name in dir.
func (f *FS) Unlink(ctx context.Context, dir Entry, name string) error {
	e, err := f.childEntry(dir, name)
	if err != nil {
		return err
	}
	if f.Writing(e) != nil {
		return fmt.Errorf("%s: %w", e.Path(), ErrBusy)
	}
	got, err := f.Lookup(ctx, dir, name)
	switch {
	case err != nil:
		return err
	case got.Dir:
		return errno.New(syscall.EISDIR, "a directory")
	}
	if err := f.w.up.DeleteObject(ctx, e.Bucket, e.Key); err != nil {
		return errno.With(syscall.EIO, err)
	}
	f.Forget(e.Bucket, e.Key)
	f.meta.PutNegative(e.Path())
	return nil
}

// Rename errors.
var (
	// ErrRenameDir: S3 has no directory to rename, only every key under a
	// prefix; EXDEV has mv copy and delete them instead.
	ErrRenameDir = errno.New(syscall.EXDEV, "directories are not renamed (S3 would copy every object under them)")
	// ErrRenameFlags: RENAME_EXCHANGE and RENAME_WHITEOUT.
	ErrRenameFlags = errno.New(syscall.EINVAL, "only a plain rename or RENAME_NOREPLACE")
)

// Rename moves the object src to name in dstDir: a copy on the server
// (copyObject), then a delete of src. noReplace refuses an existing
// destination (EEXIST); without AllowOverwrite an existing one is refused
// too (EPERM).
func (f *FS) Rename(ctx context.Context, src Entry, dstDir Entry, name string, noReplace bool) (Entry, error) {
	dst, err := f.childEntry(dstDir, name)
	if err != nil {
		return Entry{}, err
	}
	switch {
	case src.Dir:
		return Entry{}, fmt.Errorf("%s: %w", src.Path(), ErrRenameDir)
	case dst.Bucket != src.Bucket:
		return Entry{}, errno.New(syscall.EXDEV, "a rename between buckets")
	case f.Writing(dst) != nil:
		return Entry{}, fmt.Errorf("%s: %w", dst.Path(), ErrBusy)
	}
	u := f.Writing(src)
	if e, err := f.Lookup(ctx, dstDir, name); err == nil && e.Dir {
		return Entry{}, errno.New(syscall.EISDIR, "the new name is a directory")
	}
	if _, err := f.store.Stat(ctx, dst.Bucket, dst.Key); err == nil {
		switch {
		case noReplace:
			return Entry{}, fmt.Errorf("%s: %w", dst.Path(), ErrExists)
		case !f.cfg.Writes.AllowOverwrite:
			return Entry{}, fmt.Errorf("%s: %w", dst.Path(), ErrOverwrite)
		}
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return Entry{}, err
	}
	if u != nil {
		return f.renameUpload(u, src, dst)
	}
	size, etag := src.Version.Size, src.Version.ETag
	if size > f.cfg.Writes.CopyLimit {
		// A copy in parts is pinned to one version: the server's now, not
		// the one a cached lookup saw.
		o, err := f.store.Stat(ctx, src.Bucket, src.Key)
		if err != nil {
			return Entry{}, err
		}
		size, etag = o.Size, o.ETag
	}
	if err := f.copyObject(ctx, src.Bucket, src.Key, dst.Key, size, etag); err != nil {
		return Entry{}, errno.With(syscall.EIO, fmt.Errorf("rename %s to %s: copy: %w", src.Path(), dst.Path(), err))
	}
	f.Forget(dst.Bucket, dst.Key)
	if err := f.w.up.DeleteObject(ctx, src.Bucket, src.Key); err != nil {
		f.log.Warn("rename: the copy was made but the source could not be deleted: both names exist", "from", src.Path(), "to", dst.Path(), "err", err)
		return Entry{}, errno.With(syscall.EIO, fmt.Errorf("rename %s to %s: delete: %w", src.Path(), dst.Path(), err))
	}
	f.Forget(src.Bucket, src.Key)
	f.meta.PutNegative(src.Path())
	o, err := f.store.Stat(ctx, dst.Bucket, dst.Key)
	if err != nil {
		return Entry{}, err
	}
	dst.Version = o.Version
	f.meta.Put(dst.Path(), dst)
	f.w.mu.Lock()
	for k := parentKey(dst.Key); k != ""; k = parentKey(k) {
		delete(f.w.dirs, Entry{Bucket: dst.Bucket, Key: k}.Path())
	}
	f.w.mu.Unlock()
	return dst, nil
}

// renameUpload renames a file still open for writing: the namespace shows
// it under its new name at once, and its upload ends as that object
// (Upload.moveTo: a PUT under the new name, or a copy of the completed
// multipart upload).
func (f *FS) renameUpload(u *Upload, src, dst Entry) (Entry, error) {
	f.w.mu.Lock()
	if _, busy := f.w.open[dst.Path()]; busy {
		f.w.mu.Unlock()
		return Entry{}, fmt.Errorf("%s: %w", dst.Path(), ErrBusy)
	}
	if f.w.open[src.Path()] != u {
		f.w.mu.Unlock()
		return Entry{}, fmt.Errorf("%s: %w", src.Path(), ErrBusy)
	}
	delete(f.w.open, src.Path())
	f.w.open[dst.Path()] = u
	u.renameTo(dst)
	f.w.mu.Unlock()
	f.Forget(src.Bucket, src.Key)
	f.Forget(dst.Bucket, dst.Key)
	return dst, nil
}
