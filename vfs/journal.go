package vfs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// A journal records the multipart uploads a daemon has open, one file per
// daemon, locked (flock) while the daemon lives. A daemon killed
// mid-upload leaves its parts on the server, invisible but stored (and
// billed); the next start finds the journals whose lock it can take, whose
// daemons are gone, and aborts the uploads they name (AbortLeftUploads).
// Only uploads a daemon started itself are ever aborted: another writer's
// under the same prefix are not in any journal here.
type journal struct {
	mu   sync.Mutex
	file *os.File
	open map[string]bool // upload IDs begun and not ended
}

type journalLine struct {
	Op       string `json:"op"` // begin, end
	Bucket   string `json:"bucket,omitempty"`
	Key      string `json:"key,omitempty"`
	UploadID string `json:"upload_id"`
}

const journalSuffix = ".uploads"

func openJournal(dir string) (*journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("upload journal: %w", err)
	}
	name := filepath.Join(dir, fmt.Sprintf("%d-%d%s", os.Getpid(), time.Now().UnixNano(), journalSuffix))
	file, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("upload journal: %w", err)
	}
	if err := unix.Flock(int(file.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		file.Close()
		return nil, fmt.Errorf("upload journal %s: lock: %w", name, err)
	}
	return &journal{file: file, open: make(map[string]bool)}, nil
}

func (j *journal) write(l journalLine) {
	if j == nil {
		return
	}
	b, _ := json.Marshal(l)
	j.mu.Lock()
	defer j.mu.Unlock()
	if l.Op == "begin" {
		j.open[l.UploadID] = true
	} else {
		delete(j.open, l.UploadID)
	}
	// Written before the first part is sent: a kill after it finds the
	// upload named. A write that fails leaves the upload to a lifecycle rule.
	j.file.Write(append(b, '\n'))
}

func (j *journal) begin(bucket, key, id string) {
	j.write(journalLine{Op: "begin", Bucket: bucket, Key: key, UploadID: id})
}

func (j *journal) end(id string) { j.write(journalLine{Op: "end", UploadID: id}) }

// close removes the journal when it names no upload in progress, and
// otherwise leaves it, unlocked, for the next start.
func (j *journal) close() {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.open) == 0 {
		os.Remove(j.file.Name())
	}
	j.file.Close()
}

// AbortLeftUploads aborts the multipart uploads that journals of daemons
// no longer running name in this mount's bucket (or any bucket, for a
// mount of every bucket), and removes the journals it has emptied. It
// returns how many it aborted.
func (f *FS) AbortLeftUploads(ctx context.Context) (int, error) {
	if f.w == nil || f.cfg.Writes.Journal == "" {
		return 0, nil
	}
	names, err := filepath.Glob(filepath.Join(f.cfg.Writes.Journal, "*"+journalSuffix))
	if err != nil {
		return 0, err
	}
	aborted := 0
	var errs []error
	for _, name := range names {
		if name == f.w.journal.file.Name() {
			continue
		}
		n, err := f.abortJournal(ctx, name)
		aborted += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return aborted, errors.Join(errs...)
}

func (f *FS) abortJournal(ctx context.Context, name string) (int, error) {
	file, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return 0, nil // another start took it
	}
	defer file.Close()
	if unix.Flock(int(file.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return 0, nil // its daemon runs
	}
	left := map[string]journalLine{}
	var order []string
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l journalLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue // a line cut by the kill
		}
		if l.Op == "begin" {
			left[l.UploadID] = l
			order = append(order, l.UploadID)
		} else {
			delete(left, l.UploadID)
		}
	}
	aborted, kept := 0, 0
	var errs []error
	for _, id := range order {
		l, ok := left[id]
		if !ok {
			continue
		}
		if f.cfg.Bucket != "" && (l.Bucket != f.cfg.Bucket || !strings.HasPrefix(l.Key, f.cfg.Prefix)) {
			kept++ // another mount's, which its own start aborts
			continue
		}
		// A server may refuse the abort of an upload whose last part it is
		// still taking in from the killed daemon: that is transient.
		err := f.retryWrite(ctx, func(ctx context.Context) error {
			return f.w.up.AbortMultipart(ctx, l.Bucket, l.Key, l.UploadID)
		})
		switch {
		case err == nil:
			aborted++
			f.m.UploadsDone.WithLabelValues("aborted").Inc()
			f.log.Info("aborted a multipart upload a stopped daemon left", "bucket", l.Bucket, "key", l.Key, "upload_id", l.UploadID)
		case errors.Is(err, objstore.ErrNoUpload):
		default:
			kept++
			errs = append(errs, fmt.Errorf("abort %s/%s upload %s: %w", l.Bucket, l.Key, l.UploadID, err))
		}
	}
	if kept == 0 {
		os.Remove(name)
	}
	return aborted, errors.Join(errs...)
}
