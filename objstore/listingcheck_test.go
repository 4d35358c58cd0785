package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// notS3Server answers every request 200 with contentType and body.
func notS3Server(t *testing.T, contentType, body string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

func clientOf(t *testing.T, endpoint, region string) *Minio {
	t.Helper()
	m, err := NewMinio(Config{Endpoint: endpoint, Region: region, MaxRetries: 1,
		Credentials: credentials.NewStaticV4("AKIDTEST", "secret-test", "")})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A listing answered 200 with something other than an S3 listing (an HTML
// page, an S3 <Error> document, text, nothing) fails with ErrNotS3, an EIO,
// naming what came: the S3 client alone reads most of them as an empty
// listing. The bucket listing and the bucket-location request likewise.
func TestListingThatIsNotS3FailsWithErrNotS3(t *testing.T) {
	html := "<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body><p>Welcome</p></body></html>"
	for _, c := range []struct {
		name, contentType, body, want string
	}{
		{"html", "text/html; charset=utf-8", html, `with a <html> document, starting "<!DOCTYPE html>`},
		{"error document", "application/xml", `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
			`<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`, "an S3 error document (AccessDenied: Access Denied)"},
		{"text", "text/plain", "service unavailable, try later", "a body that is not XML"},
		{"empty", "", "", "an empty body"},
		{"long text", "text/html", strings.Repeat("<!-- padding -->\n", 400), "no XML element in its first 4096 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, requests := notS3Server(t, c.contentType, c.body)
			m := clientOf(t, srv.URL, "us-east-1")
			check := func(what string, err error, wantRoot string) {
				t.Helper()
				if !errors.Is(err, ErrNotS3) {
					t.Fatalf("%s: %v, want ErrNotS3", what, err)
				}
				if code, _ := errno.Of(err); code != syscall.EIO {
					t.Errorf("%s: errno %v, want EIO", what, code)
				}
				if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "instead of a "+wantRoot) {
					t.Errorf("%s: %q, want it to say %q and name %s", what, err, c.want, wantRoot)
				}
			}
			_, err := m.List(context.Background(), "data", "dir/", "", 0)
			check("List", err, "ListBucketResult")
			check("CheckBucket", m.CheckBucket(context.Background(), "data"), "ListBucketResult")
			_, err = m.ListBuckets(context.Background())
			check("ListBuckets", err, "ListAllMyBucketsResult")
			// No region: the client asks for the bucket's location first.
			_, err = clientOf(t, srv.URL, "").List(context.Background(), "data", "", "", 0)
			check("List without a region", err, "LocationConstraint")
			if requests.Load() == 0 {
				t.Fatal("the server saw no request")
			}
		})
	}
}

// A real listing passes the check whole, however long: the bytes looked at
// are handed on to the client.
func TestListingCheckPassesS3Listings(t *testing.T) {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>data</Name><Prefix>dir/</Prefix><KeyCount>300</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>false</IsTruncated>`)
	for i := range 300 {
		fmt.Fprintf(&b, `<Contents><Key>dir/object-%03d</Key><LastModified>2024-01-02T03:04:05.000Z</LastModified><ETag>&quot;e%03d&quot;</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>`, i, i, i+1)
	}
	b.WriteString(`<CommonPrefixes><Prefix>dir/sub/</Prefix></CommonPrefixes></ListBucketResult>`)
	srv, _ := notS3Server(t, "application/xml", b.String())
	page, err := clientOf(t, srv.URL, "us-east-1").List(context.Background(), "data", "dir/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 300 || len(page.Prefixes) != 1 || page.Prefixes[0] != "dir/sub/" {
		t.Fatalf("listed %d objects, prefixes %q; want 300 and [dir/sub/]", len(page.Objects), page.Prefixes)
	}
	for i, o := range page.Objects {
		if want := fmt.Sprintf("dir/object-%03d", i); o.Key != want || o.Size != int64(i+1) || o.ETag != fmt.Sprintf("e%03d", i) {
			t.Fatalf("object %d: %+v, want %s of %d bytes", i, o, want, i+1)
		}
	}
}

// A listing cut short before its first element has ended is a transport
// failure, not an endpoint that is not S3: it fails, but not as ErrNotS3.
func TestListingCutShortIsNotErrNotS3(t *testing.T) {
	for _, body := range []string{`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<ListBucketRes`, `<?xml version="1.0" encoding="UTF-8"?>`} {
		srv, _ := notS3Server(t, "application/xml", body)
		_, err := clientOf(t, srv.URL, "us-east-1").List(context.Background(), "data", "", "", 0)
		if err == nil || errors.Is(err, ErrNotS3) {
			t.Errorf("a listing cut short (%q): %v, want an error other than ErrNotS3", body, err)
		}
	}
}

// Words of the server that hold "EOF" are left out of the error: the S3
// client would replace the error, ErrNotS3 with it.
func TestNotS3KeepsItsErrorWhateverTheServerSays(t *testing.T) {
	srv, _ := notS3Server(t, "text/html", "<html><body>EOF</body></html>")
	_, err := clientOf(t, srv.URL, "us-east-1").List(context.Background(), "data", "", "", 0)
	if !errors.Is(err, ErrNotS3) {
		t.Fatalf("%v, want ErrNotS3", err)
	}
}
