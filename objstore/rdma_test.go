package objstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// rdmaTestToken is a syntactically valid token naming 1 GiB at a made-up
// address; no server here can act on it.
var rdmaTestToken = rdmatoken.Token{Addr: 0x7f0000000000, Size: 1 << 30, RKey: 0x1234, LID: 1, DCT: 0x42, HasGID: true}.String()

func minioTestStore(t testing.TB, endpoint, access, secret string) *Minio {
	t.Helper()
	m, err := NewMinio(Config{
		Endpoint:    endpoint,
		Region:      testenv.Region,
		Credentials: credentials.NewStaticV4(access, secret, ""),
		MaxRetries:  1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// versitygw v1.8.0's posix backend has no RDMA: it ignores the token and
// answers the ranged GET with the bytes in the body. The token header is
// among the signed headers, so the request only succeeds if the signature
// over it is right.
func TestGetRangeRDMAAgainstVersityGWIgnoresToken(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "rdma")
	const size, seed = 3<<20 + 17, 41
	srv.PutRandomObject(t, "rdma", "obj", size, seed)
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ctx := context.Background()
	obj, err := m.Stat(ctx, "rdma", "obj")
	if err != nil {
		t.Fatal(err)
	}

	const off, n = 12345, 2<<20 + 3
	rep, err := m.GetRangeRDMA(ctx, "rdma", "obj", off, n, obj.Version, rdmaTestToken)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != RDMATokenIgnored || rep.Body == nil || rep.Bytes != 0 || rep.Status != http.StatusPartialContent {
		t.Fatalf("reply %+v, want TokenIgnored with a body and status 206", rep)
	}
	got, err := io.ReadAll(rep.Body)
	rep.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(testenv.RandomBytes(seed, off, n)) {
		t.Fatalf("body of %d bytes does not match the object's range", len(got))
	}

	// The version pin holds on this path too.
	stale := obj.Version
	stale.ETag = "0123456789abcdef0123456789abcdef"
	if _, err := m.GetRangeRDMA(ctx, "rdma", "obj", off, n, stale, rdmaTestToken); !errors.Is(err, ErrChanged) {
		t.Errorf("stale ETag: %v, want ErrChanged", err)
	}
	if _, err := m.GetRangeRDMA(ctx, "rdma", "absent", 0, 1, Version{}, rdmaTestToken); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent key: %v, want ErrNotFound", err)
	}
}

func TestGetRangeRDMARefusesBadTokensWithoutSending(t *testing.T) {
	var requests int
	var mu sync.Mutex
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer ts.Close()
	m := minioTestStore(t, ts.URL, "AK", "SK")
	small := rdmatoken.Token{Addr: 1, Size: 100}.String()
	old := rdmaTestToken + ":00007f0000000000:0000000040000000"
	for name, tok := range map[string]string{
		"empty": "", "uppercase": strings.ToUpper(rdmaTestToken), "old 115-char form": old, "smaller than the range": small,
	} {
		_, err := m.GetRangeRDMA(context.Background(), "bkt", "key", 0, 101, Version{}, tok)
		if !errors.Is(err, ErrTokenRejected) {
			t.Errorf("%s: %v, want ErrTokenRejected", name, err)
		}
	}
	if _, err := m.GetRangeRDMA(context.Background(), "bkt", "key", 0, rdmatoken.MaxServerOp+1, Version{}, rdmaTestToken); err == nil {
		t.Error("a range over MaxServerOp was accepted")
	}
	if requests != 0 {
		t.Errorf("%d requests sent", requests)
	}
}

// replyFixture answers every GET with a fixed reply, standing in for
// replies of RDMA servers (AIStor, NooBaa) that no server here produces,
// and records the request it got.
type replyFixture struct {
	status  int
	headers map[string]string
	body    string

	mu  sync.Mutex
	got *http.Request
}

func (f *replyFixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.got = r.Clone(context.Background())
	f.mu.Unlock()
	h := w.Header()
	h.Set("Last-Modified", time.Unix(1700000000, 0).UTC().Format(http.TimeFormat))
	h.Set("ETag", `"e1"`)
	for k, v := range f.headers {
		h.Set(k, v)
	}
	h.Set("Content-Length", fmt.Sprint(len(f.body)))
	w.WriteHeader(f.status)
	io.WriteString(w, f.body)
}

func TestGetRangeRDMAClassifiesReplies(t *testing.T) {
	const n = 10
	errorXML := func(code, msg string) string {
		return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>` + msg + `</Message></Error>`
	}
	cases := []struct {
		name    string
		fixture *replyFixture
		outcome RDMAOutcome
		bytes   int64
		body    string // expected body, "" for none
		status  int
		err     error // sentinel; errAny for an unclassified error
	}{
		{name: "served 206", fixture: &replyFixture{status: 206, headers: map[string]string{
			"x-amz-rdma-reply": "206", "x-amz-rdma-bytes-transferred": "10", "Content-Range": "bytes 5-14/100"}},
			outcome: RDMAServed, bytes: n, status: 206},
		{name: "served 200 without a bytes header is the whole range", fixture: &replyFixture{status: 200, headers: map[string]string{
			"x-amz-rdma-reply": "200"}}, outcome: RDMAServed, bytes: n, status: 200},
		{name: "short transfer", fixture: &replyFixture{status: 206, headers: map[string]string{
			"x-amz-rdma-reply": "206", "x-amz-rdma-bytes-transferred": "4"}}, outcome: RDMAShortTransfer, bytes: 4, status: 206},
		{name: "HTTP 501 declines", fixture: &replyFixture{status: 501, body: errorXML("NotImplemented", "RDMA is not available")},
			outcome: RDMADeclined501, status: 501},
		{name: "2xx with reply 501 declines and carries the body", fixture: &replyFixture{status: 206, headers: map[string]string{
			"x-amz-rdma-reply": "501", "Content-Range": "bytes 5-14/100"}, body: "0123456789"},
			outcome: RDMADeclined501, body: "0123456789", status: 206},
		{name: "token ignored", fixture: &replyFixture{status: 206, headers: map[string]string{"Content-Range": "bytes 5-14/100"},
			body: "abcdefghij"}, outcome: RDMATokenIgnored, body: "abcdefghij", status: 206},
		{name: "400 InvalidToken", fixture: &replyFixture{status: 400, body: errorXML("InvalidToken", "The provided token is malformed")},
			err: ErrTokenRejected},
		{name: "403 naming the rdma token", fixture: &replyFixture{status: 403, body: errorXML("AccessDenied", "x-amz-rdma-token names no registered region")},
			err: ErrTokenRejected},
		{name: "403 about credentials", fixture: &replyFixture{status: 403, body: errorXML("AccessDenied", "Access Denied.")},
			err: ErrAccessDenied},
		{name: "412", fixture: &replyFixture{status: 412, body: errorXML("PreconditionFailed", "At least one of the pre-conditions you specified did not hold")},
			err: ErrChanged},
		{name: "served with a body", fixture: &replyFixture{status: 206, headers: map[string]string{"x-amz-rdma-reply": "206"}, body: "0123456789"},
			err: errAny},
		{name: "more bytes than asked", fixture: &replyFixture{status: 206, headers: map[string]string{
			"x-amz-rdma-reply": "206", "x-amz-rdma-bytes-transferred": "11"}}, err: errAny},
		{name: "bad bytes header", fixture: &replyFixture{status: 206, headers: map[string]string{
			"x-amz-rdma-reply": "206", "x-amz-rdma-bytes-transferred": "ten"}}, err: errAny},
		{name: "unknown reply code", fixture: &replyFixture{status: 200, headers: map[string]string{"x-amz-rdma-reply": "207"}}, err: errAny},
		{name: "HTTP 204", fixture: &replyFixture{status: 204, headers: map[string]string{"x-amz-rdma-reply": "204"}}, err: errAny},
		{name: "ignored with a short body", fixture: &replyFixture{status: 206, body: "abc"}, err: errAny},
		{name: "object changed under the range", fixture: &replyFixture{status: 206, headers: map[string]string{
			"x-amz-rdma-reply": "206", "Content-Range": "bytes 5-14/99"}}, err: ErrChanged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(c.fixture)
			defer ts.Close()
			m := minioTestStore(t, ts.URL, "AK", "SK")
			rep, err := m.GetRangeRDMA(context.Background(), "bkt", "key", 5, n, Version{ETag: "e1", Size: 100}, rdmaTestToken)
			switch {
			case c.err == errAny:
				if err == nil || errors.Is(err, ErrTokenRejected) || c.fixture.got == nil {
					t.Fatalf("got %+v, %v; want an error from the reply", rep, err)
				}
				t.Log(err)
				return
			case c.err != nil:
				if !errors.Is(err, c.err) || c.fixture.got == nil {
					t.Fatalf("got %+v, %v; want %v from the reply", rep, err, c.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if rep.Outcome != c.outcome || rep.Bytes != c.bytes || rep.Status != c.status {
				t.Errorf("reply %v bytes %d status %d, want %v %d %d", rep.Outcome, rep.Bytes, rep.Status, c.outcome, c.bytes, c.status)
			}
			if (rep.Body != nil) != (c.body != "") {
				t.Fatalf("body %v, want %q", rep.Body, c.body)
			}
			if rep.Body != nil {
				got, err := io.ReadAll(rep.Body)
				rep.Body.Close()
				if err != nil || string(got) != c.body {
					t.Errorf("body %q, %v; want %q", got, err, c.body)
				}
			}
			checkRDMARequest(t, c.fixture.got, "bytes=5-14", `"e1"`)
		})
	}
}

var errAny = errors.New("any unclassified error")

// checkRDMARequest checks the request as the server saw it: the token in
// its header and among the signed headers, the range and the version pin.
func checkRDMARequest(t *testing.T, r *http.Request, wantRange, wantIfMatch string) {
	t.Helper()
	if r == nil {
		t.Fatal("no request reached the server")
	}
	if r.Method != http.MethodGet || r.Header.Get(RDMATokenHeader) != rdmaTestToken {
		t.Errorf("%s with token %q", r.Method, r.Header.Get(RDMATokenHeader))
	}
	if r.Header.Get("Range") != wantRange || r.Header.Get("If-Match") != wantIfMatch {
		t.Errorf("Range %q If-Match %q", r.Header.Get("Range"), r.Header.Get("If-Match"))
	}
	auth := r.Header.Get("Authorization")
	i := strings.Index(auth, "SignedHeaders=")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || i < 0 {
		t.Fatalf("not signed with SigV4 in headers: %q", auth)
	}
	signed := strings.Split(strings.SplitN(auth[i+len("SignedHeaders="):], ",", 2)[0], ";")
	for _, h := range []string{"host", "range", "if-match", "x-amz-content-sha256", "x-amz-date", RDMATokenHeader} {
		if !slices.Contains(signed, h) {
			t.Errorf("%s is not among the signed headers %v", h, signed)
		}
	}
	if sha := r.Header.Get("X-Amz-Content-Sha256"); sha != "UNSIGNED-PAYLOAD" && sha != fmt.Sprintf("%x", sha256.Sum256(nil)) {
		t.Errorf("x-amz-content-sha256 %q", sha)
	}
}

// storeWithoutRDMA is a Store that cannot send RDMA GETs.
type storeWithoutRDMA struct{ Store }

func TestMeteredGetRangeRDMA(t *testing.T) {
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	ts := httptest.NewServer(&replyFixture{status: 206, headers: map[string]string{"x-amz-rdma-reply": "206"}})
	defer ts.Close()
	s := Metered{Inner: minioTestStore(t, ts.URL, "AK", "SK"), M: m}
	rep, err := s.GetRangeRDMA(context.Background(), "bkt", "key", 0, 10, Version{}, rdmaTestToken)
	if err != nil || rep.Outcome != RDMAServed {
		t.Fatalf("%+v, %v", rep, err)
	}
	ignored := httptest.NewServer(&replyFixture{status: 200, body: "0123456789"})
	defer ignored.Close()
	s.Inner = minioTestStore(t, ignored.URL, "AK", "SK")
	rep, err = s.GetRangeRDMA(context.Background(), "bkt", "key", 0, 10, Version{}, rdmaTestToken)
	if err != nil || rep.Outcome != RDMATokenIgnored {
		t.Fatalf("%+v, %v", rep, err)
	}
	io.ReadAll(rep.Body)
	rep.Body.Close()

	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	reqs := snap["s3_requests_total"].(map[string]float64)
	if reqs["get_rdma,served"] != 1 || reqs["get_rdma,token_ignored"] != 1 {
		t.Errorf("requests %v", reqs)
	}
	if snap["s3_received_bytes_total"] != 10.0 || snap["bytes_in_flight"] != 0.0 {
		t.Errorf("received %v in flight %v: only the ignored reply's body came over HTTP", snap["s3_received_bytes_total"], snap["bytes_in_flight"])
	}

	s.Inner = storeWithoutRDMA{}
	if _, err := s.GetRangeRDMA(context.Background(), "bkt", "key", 0, 10, Version{}, rdmaTestToken); !errors.Is(err, ErrNoRDMAGetter) {
		t.Errorf("store without RDMA: %v", err)
	}
}
