package objstore

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// partToken names exactly a part of n bytes, as the write path mints it.
func partToken(n int64) string {
	return rdmatoken.Token{Addr: 0x7f0000000000, Size: uint32(n), RKey: 0x1234, LID: 1, DCT: 0x42, HasGID: true}.String()
}

// versitygw has no RDMA: it ignores the token and stores the empty body
// the request carries, answering 200 with an ETag. That must read as
// token_ignored, never as served. The request only succeeds if its
// signature (over the token, with UNSIGNED-PAYLOAD) is right.
func TestUploadPartRDMAAgainstVersityGWIsTokenIgnored(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "rdma")
	m := minioTestStore(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ctx := context.Background()
	id, err := m.CreateMultipart(ctx, "rdma", "obj")
	if err != nil {
		t.Fatal(err)
	}
	defer m.AbortMultipart(ctx, "rdma", "obj", id)
	const n = 5 << 20
	rep, err := m.UploadPartRDMA(ctx, PartTarget{Bucket: "rdma", Key: "obj", UploadID: id, Number: 1, Size: n}, partToken(n))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != RDMATokenIgnored || rep.Bytes != 0 || rep.ETag != "" || rep.Status != http.StatusOK {
		t.Fatalf("reply %+v, want token_ignored with status 200 and no ETag taken", rep)
	}
	// An upload that is not there is an answer, not a decline.
	_, err = m.UploadPartRDMA(ctx, PartTarget{Bucket: "rdma", Key: "obj", UploadID: "no-such-upload", Number: 1, Size: n}, partToken(n))
	if !errors.Is(err, ErrNoUpload) {
		t.Fatalf("missing upload: %v, want ErrNoUpload", err)
	}
}

func TestUploadPartRDMARefusesBadTargetsWithoutSending(t *testing.T) {
	f := &replyFixture{status: 500}
	ts := httptest.NewServer(f)
	defer ts.Close()
	m := minioTestStore(t, ts.URL, "AK", "SK")
	ok := PartTarget{Bucket: "b", Key: "k", UploadID: "u", Number: 1, Size: 100}
	for name, c := range map[string]struct {
		p     PartTarget
		token string
		sent  error
	}{
		"token of another size": {ok, partToken(99), ErrTokenRejected},
		"malformed token":       {ok, "nope", ErrTokenRejected},
		"part 0":                {PartTarget{Bucket: "b", Key: "k", UploadID: "u", Number: 0, Size: 100}, partToken(100), nil},
		"no upload id":          {PartTarget{Bucket: "b", Key: "k", Number: 1, Size: 100}, partToken(100), nil},
		"over one server op":    {PartTarget{Bucket: "b", Key: "k", UploadID: "u", Number: 1, Size: rdmatoken.MaxServerOp + 1}, partToken(100), nil},
	} {
		_, err := m.UploadPartRDMA(context.Background(), c.p, c.token)
		if err == nil || (c.sent != nil && !errors.Is(err, c.sent)) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if f.got != nil {
		t.Errorf("a request was sent: %s %s", f.got.Method, f.got.URL)
	}
}

func TestUploadPartRDMAClassifiesReplies(t *testing.T) {
	const n = 10
	errorXML := func(code, msg string) string {
		return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>` + msg + `</Message></Error>`
	}
	cases := []struct {
		name    string
		fixture *replyFixture
		outcome RDMAOutcome
		bytes   int64
		etag    string
		err     error // sentinel; errAny for an unclassified error
	}{
		{name: "served", fixture: &replyFixture{status: 200, headers: map[string]string{
			"x-amz-rdma-reply": "200", "x-amz-rdma-bytes-transferred": "10"}}, outcome: RDMAServed, bytes: n, etag: "e1"},
		{name: "200 and an ETag alone is token_ignored", fixture: &replyFixture{status: 200}, outcome: RDMATokenIgnored},
		{name: "HTTP 501 declines", fixture: &replyFixture{status: 501, body: errorXML("NotImplemented", "RDMA is not available")},
			outcome: RDMADeclined501},
		{name: "2xx with reply 501 declines", fixture: &replyFixture{status: 200, headers: map[string]string{"x-amz-rdma-reply": "501"}},
			outcome: RDMADeclined501},
		{name: "short transfer", fixture: &replyFixture{status: 200, headers: map[string]string{
			"x-amz-rdma-reply": "200", "x-amz-rdma-bytes-transferred": "4"}}, outcome: RDMAShortTransfer, bytes: 4},
		{name: "no bytes header is not served", fixture: &replyFixture{status: 200, headers: map[string]string{"x-amz-rdma-reply": "200"}}, err: errAny},
		{name: "more bytes than the part", fixture: &replyFixture{status: 200, headers: map[string]string{
			"x-amz-rdma-reply": "200", "x-amz-rdma-bytes-transferred": "11"}}, err: errAny},
		{name: "bad bytes header", fixture: &replyFixture{status: 200, headers: map[string]string{
			"x-amz-rdma-reply": "200", "x-amz-rdma-bytes-transferred": "ten"}}, err: errAny},
		{name: "unknown reply code", fixture: &replyFixture{status: 200, headers: map[string]string{"x-amz-rdma-reply": "207"}}, err: errAny},
		{name: "400 InvalidToken", fixture: &replyFixture{status: 400, body: errorXML("InvalidToken", "The provided token is malformed")},
			err: ErrTokenRejected},
		{name: "403 about credentials", fixture: &replyFixture{status: 403, body: errorXML("AccessDenied", "Access Denied.")},
			err: ErrAccessDenied},
		{name: "no such upload", fixture: &replyFixture{status: 404, body: errorXML("NoSuchUpload", "The specified upload does not exist")},
			err: ErrNoUpload},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(c.fixture)
			defer ts.Close()
			m := minioTestStore(t, ts.URL, "AK", "SK")
			rep, err := m.UploadPartRDMA(context.Background(), PartTarget{Bucket: "bkt", Key: "dir/key", UploadID: "up1", Number: 3, Size: n}, partToken(n))
			switch {
			case c.err == errAny:
				if err == nil || errors.Is(err, ErrTokenRejected) || c.fixture.got == nil {
					t.Fatalf("got %+v, %v; want an error from the reply", rep, err)
				}
				if rep.Outcome == RDMAServed {
					t.Fatalf("an error counted as served: %+v", rep)
				}
				return
			case c.err != nil:
				if !errors.Is(err, c.err) || c.fixture.got == nil {
					t.Fatalf("got %+v, %v; want %v from the reply", rep, err, c.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if rep.Outcome != c.outcome || rep.Bytes != c.bytes || rep.ETag != c.etag {
				t.Errorf("reply %+v, want %v %d bytes ETag %q", rep, c.outcome, c.bytes, c.etag)
			}
			checkRDMAPut(t, c.fixture.got)
		})
	}
}

// checkRDMAPut checks the request as the server saw it: an UploadPart
// with the token signed, UNSIGNED-PAYLOAD, and no body.
func checkRDMAPut(t *testing.T, r *http.Request) {
	t.Helper()
	if r.Method != http.MethodPut || r.URL.Path != "/bkt/dir/key" ||
		r.URL.Query().Get("partNumber") != "3" || r.URL.Query().Get("uploadId") != "up1" {
		t.Errorf("%s %s", r.Method, r.URL)
	}
	if r.Header.Get(RDMATokenHeader) != partToken(10) || r.ContentLength != 0 || r.Header.Get("Content-Length") != "0" {
		t.Errorf("token %q content-length %d (%q)", r.Header.Get(RDMATokenHeader), r.ContentLength, r.Header.Get("Content-Length"))
	}
	if r.Header.Get("X-Amz-Content-Sha256") != "UNSIGNED-PAYLOAD" {
		t.Errorf("x-amz-content-sha256 %q", r.Header.Get("X-Amz-Content-Sha256"))
	}
	auth := r.Header.Get("Authorization")
	i := strings.Index(auth, "SignedHeaders=")
	if i < 0 {
		t.Fatalf("not signed: %q", auth)
	}
	signed := strings.Split(strings.SplitN(auth[i+len("SignedHeaders="):], ",", 2)[0], ";")
	for _, h := range []string{"host", "x-amz-content-sha256", "x-amz-date", RDMATokenHeader} {
		if !slices.Contains(signed, h) {
			t.Errorf("%s is not among the signed headers %v", h, signed)
		}
	}
}

func TestMeteredUploadPartRDMA(t *testing.T) {
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	served := httptest.NewServer(&replyFixture{status: 200, headers: map[string]string{"x-amz-rdma-reply": "200", "x-amz-rdma-bytes-transferred": "10"}})
	defer served.Close()
	ignored := httptest.NewServer(&replyFixture{status: 200})
	defer ignored.Close()
	p := PartTarget{Bucket: "bkt", Key: "key", UploadID: "u", Number: 1, Size: 10}
	for _, ts := range []*httptest.Server{served, ignored} {
		s := Metered{Inner: minioTestStore(t, ts.URL, "AK", "SK"), M: m}
		if _, err := s.UploadPartRDMA(context.Background(), p, partToken(10)); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	reqs := snap["s3_requests_total"].(map[string]float64)
	if reqs["upload_part_rdma,served"] != 1 || reqs["upload_part_rdma,token_ignored"] != 1 {
		t.Errorf("requests %v", reqs)
	}
	if _, err := (Metered{Inner: storeWithoutRDMA{}, M: m}).UploadPartRDMA(context.Background(), p, partToken(10)); !errors.Is(err, ErrNoRDMAGetter) {
		t.Errorf("store without RDMA: %v", err)
	}
}
