package integration

import (
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// What notS3Proxy answers listings with.
const (
	passListings  int32 = iota
	htmlListings        // 200, a web page
	errorListings       // 200, an S3 <Error> document
)

// notS3Proxy forwards to upstream, and while its mode says so answers the
// listings (ListObjectsV2, ListBuckets) 200 with what is not a listing, as
// a web console, a proxy's login page or a broken gateway would.
func notS3Proxy(t *testing.T, upstream string) (string, *atomic.Int32) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	// The Host header is the proxy's, as the client signed it.
	forward := httputil.NewSingleHostReverseProxy(u)
	forward.ErrorLog = log.New(io.Discard, "", 0) // lookups the mount cancels
	var mode atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		listing := r.Method == http.MethodGet &&
			(r.URL.Query().Has("list-type") || (r.URL.Path == "/" && r.URL.RawQuery == ""))
		switch m := mode.Load(); {
		case listing && m == htmlListings:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<!DOCTYPE html>\n<html><head><title>Storage console</title></head><body><p>Sign in</p></body></html>\n"))
		case listing && m == errorListings:
			w.Header().Set("Content-Type", "application/xml")
			w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
				`<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>`))
		default:
			forward.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &mode
}

// An endpoint that answers the start-up check's listing 200 with a web page
// or an <Error> document does not mount (an empty bucket, before): the
// error names --endpoint and says it did not answer as S3. Mounts of one
// bucket (a LIST of it) and of all buckets (the bucket listing) alike.
func TestMountRefusesAnEndpointThatDoesNotAnswerAsS3(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "x.txt", []byte("x"))
	endpoint, mode := notS3Proxy(t, srv.Endpoint)
	for _, c := range []struct {
		name   string
		mode   int32
		bucket string
		want   string
	}{
		{"html, one bucket", htmlListings, "data", "with a <html> document"},
		{"html, all buckets", htmlListings, "", "instead of a ListAllMyBucketsResult"},
		{"error document with 200", errorListings, "data", "an S3 error document (InternalError: We encountered an internal error.)"},
	} {
		mode.Store(c.mode)
		cfg := mounttest.Config(t, srv, c.bucket, t.TempDir())
		cfg.S3.Endpoint = endpoint
		d, err := daemon.Start(cfg)
		if err == nil {
			d.Unmount()
			t.Errorf("%s: mounted", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, err)
		if msg := err.Error(); !strings.Contains(msg, "(--endpoint) did not answer as S3") || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want it to name --endpoint, say it did not answer as S3, and %q", c.name, msg, c.want)
		}
	}
	// The same proxy passing listings on mounts, and lists the bucket.
	mode.Store(passListings)
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) { c.S3.Endpoint = endpoint })
	if es, err := os.ReadDir(mp); err != nil || len(es) != 1 || es[0].Name() != "x.txt" {
		t.Fatalf("ls through the proxy passing listings: %v, %v", es, err)
	}
}

// On a running mount, a directory listing answered 200 with a web page or
// an <Error> document is EIO (an empty directory, before), logged with what
// came; listings that are S3 again list again.
func TestListingThatIsNotS3IsEIO(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	for _, k := range []string{"a/1", "a/2", "b/1", "c/1"} {
		srv.PutObject(t, "data", k, []byte(k))
	}
	endpoint, mode := notS3Proxy(t, srv.Endpoint)
	logs := &testenv.SyncBuffer{}
	mp, _ := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.S3.Endpoint = endpoint
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	// The directories are known (looked up) before the listings turn bad,
	// so that what fails below is the directory's listing.
	for _, dir := range []string{"a", "b", "c"} {
		if st, err := os.Stat(filepath.Join(mp, dir)); err != nil || !st.IsDir() {
			t.Fatalf("stat %s: %v, %v", dir, st, err)
		}
	}
	ls := func(dir string) ([]string, error) {
		es, err := os.ReadDir(filepath.Join(mp, dir))
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names, err
	}
	for _, c := range []struct {
		dir  string
		mode int32
		want string
	}{
		{"a", htmlListings, "with a <html> document"},
		{"b", errorListings, "an S3 error document (InternalError"},
	} {
		mode.Store(c.mode)
		names, err := ls(c.dir)
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("ls %s answered with a listing that is not S3: %q, %v; want EIO", c.dir, names, err)
		}
		if !strings.Contains(logs.String(), "did not answer as S3") || !strings.Contains(logs.String(), c.want) {
			t.Errorf("ls %s: the log does not say the endpoint did not answer as S3 with %q:\n%s", c.dir, c.want, logs.String())
		}
	}
	mode.Store(passListings)
	if names, err := ls("c"); err != nil || !slices.Equal(names, []string{"1"}) {
		t.Fatalf("ls c with S3 listings again: %q, %v", names, err)
	}
}
