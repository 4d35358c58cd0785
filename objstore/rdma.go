package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// S3-over-RDMA headers (docs/protocol.md).
const (
	RDMATokenHeader = rdmatoken.Header               // request: where the server writes
	RDMAReplyHeader = "x-amz-rdma-reply"             // reply: 200/204/206 served, 501 declined
	RDMABytesHeader = "x-amz-rdma-bytes-transferred" // reply: bytes the server wrote
)

var (
	// ErrTokenRejected: the token was malformed, or the server refused it
	// (a 400 or 403 whose error names the token).
	ErrTokenRejected = errors.New("RDMA token rejected")
	// ErrNoRDMAGetter: the store cannot send S3-over-RDMA GETs.
	ErrNoRDMAGetter = errors.New("store cannot send S3-over-RDMA requests")
)

// RDMAGetter is implemented by stores that can send S3-over-RDMA GETs.
type RDMAGetter interface {
	// GetRangeRDMA sends a ranged GET of n bytes at off, pinned to v as
	// GetRange is, with token in x-amz-rdma-token, and says how the server
	// answered. A decline is an outcome, not an error; an error means the
	// request failed (ErrTokenRejected among others) and nothing was
	// written that the caller may count.
	GetRangeRDMA(ctx context.Context, bucket, key string, off, n int64, v Version, token string) (RDMAReply, error)
}

// RDMAOutcome is how a server answered a GET that carried a token.
type RDMAOutcome int

const (
	// RDMAServed: the server wrote all n bytes into the token's buffer.
	RDMAServed RDMAOutcome = iota + 1
	// RDMADeclined501: the server declined RDMA for this request: HTTP 501
	// (no object), or x-amz-rdma-reply: 501 on a 2xx that carries the body.
	RDMADeclined501
	// RDMATokenIgnored: a 2xx with the object in the body and no
	// x-amz-rdma-reply: a server without RDMA.
	RDMATokenIgnored
	// RDMAShortTransfer: served, but the server wrote fewer than n bytes.
	RDMAShortTransfer
)

var rdmaOutcomeNames = [...]string{
	RDMAServed:        "served",
	RDMADeclined501:   "declined_501",
	RDMATokenIgnored:  "token_ignored",
	RDMAShortTransfer: "short_transfer",
}

func (o RDMAOutcome) String() string {
	if o > 0 && int(o) < len(rdmaOutcomeNames) {
		return rdmaOutcomeNames[o]
	}
	return "rdma_outcome(" + strconv.Itoa(int(o)) + ")"
}

// RDMAReply is a server's answer to a GET with a token.
type RDMAReply struct {
	Outcome RDMAOutcome
	// Bytes the server says it wrote into the buffer
	// (x-amz-rdma-bytes-transferred; a missing header means the whole
	// range). Zero unless Served or ShortTransfer.
	Bytes int64
	// Body carries the object's n bytes when they came over HTTP instead:
	// always for TokenIgnored, and for Declined501 when the server put the
	// body on its 2xx decline. The caller reads exactly n bytes (a short
	// body reads as io.ErrUnexpectedEOF) and closes it. Nil otherwise.
	Body io.ReadCloser
	// Status is the HTTP status: 501 for an HTTP decline; on 2xx replies
	// minio-go does not expose it, so it is the x-amz-rdma-reply code when
	// there is one, else 206 with a Content-Range, else 200.
	Status int
}

// GetRangeRDMA implements RDMAGetter.
//
// The request is the ranged, conditional GET of GetRange plus the token
// header; minio-go signs every header it sends (the token among them) and
// signs a GET with the SHA-256 of the empty payload in x-amz-content-sha256.
func (m *Minio) GetRangeRDMA(ctx context.Context, bucket, key string, off, n int64, v Version, token string) (RDMAReply, error) {
	where := bucket + "/" + key
	if n <= 0 || off < 0 {
		return RDMAReply{}, fmt.Errorf("get %s: bad range offset %d length %d", where, off, n)
	}
	if n > rdmatoken.MaxServerOp {
		return RDMAReply{}, fmt.Errorf("get %s: %d bytes over RDMA in one request, at most %d (split the read)", where, n, rdmatoken.MaxServerOp)
	}
	tok, err := rdmatoken.Parse(token)
	if err != nil {
		return RDMAReply{}, fmt.Errorf("get %s: %w: %w", where, ErrTokenRejected, err)
	}
	if int64(tok.Size) < n {
		return RDMAReply{}, fmt.Errorf("get %s: %w: the token names %d bytes, the range is %d", where, ErrTokenRejected, tok.Size, n)
	}
	opts, err := pinnedRange(off, n, v)
	if err != nil {
		return RDMAReply{}, err
	}
	opts.Set(RDMATokenHeader, token)

	body, info, hdr, err := m.getCore.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return classifyRDMAError(err, bucket, key)
	}
	if body == nil {
		// minio-go answers a 2xx other than 200 and 206 without a body or
		// an error, and without its headers: nothing says what was written.
		return RDMAReply{}, fmt.Errorf("get %s: a 2xx reply other than 200 or 206, whose headers minio-go does not expose", where)
	}
	rep, err := readRDMAReply(body, info, hdr, n)
	if err != nil {
		body.Close()
		return RDMAReply{}, fmt.Errorf("get %s: %w", where, err)
	}
	// The reply must be the pinned version whatever carried the bytes.
	if err := checkVersion(v, cleanETag(info.ETag), hdr); err != nil {
		if rep.Body != nil {
			rep.Body.Close()
		}
		return RDMAReply{}, fmt.Errorf("get %s: %w", where, err)
	}
	return rep, nil
}

// classifyRDMAError turns an HTTP 501 into a decline and a refused token
// into ErrTokenRejected; everything else is classified as GetRange does.
func classifyRDMAError(err error, bucket, key string) (RDMAReply, error) {
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.StatusCode == http.StatusNotImplemented:
		return RDMAReply{Outcome: RDMADeclined501, Status: http.StatusNotImplemented}, nil
	case (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusForbidden) && namesToken(resp):
		return RDMAReply{Status: resp.StatusCode}, fmt.Errorf("%s/%s: %w (%d %s)", bucket, key, ErrTokenRejected, resp.StatusCode, describe(resp, err))
	case resp.StatusCode == http.StatusNoContent:
		// minio-go reports a 204 as an error and drops its headers, so
		// x-amz-rdma-bytes-transferred is lost: never count it as served.
		return RDMAReply{Status: resp.StatusCode}, fmt.Errorf("%s/%s: HTTP 204 reply to a GET: minio-go hides its RDMA headers", bucket, key)
	}
	return RDMAReply{Status: resp.StatusCode}, classify(err, bucket, key)
}

// namesToken: S3's code for a bad token is InvalidToken; servers that
// invent their own code or reuse InvalidArgument say "rdma" somewhere.
func namesToken(resp minio.ErrorResponse) bool {
	return resp.Code == "InvalidToken" ||
		strings.Contains(strings.ToLower(resp.Code), "rdma") ||
		strings.Contains(strings.ToLower(resp.Message), "rdma")
}

// readRDMAReply classifies a 2xx reply. On success the body has been
// consumed and closed unless the reply hands it to the caller.
func readRDMAReply(body io.ReadCloser, info minio.ObjectInfo, hdr http.Header, n int64) (RDMAReply, error) {
	status := http.StatusOK
	if hdr.Get("Content-Range") != "" {
		status = http.StatusPartialContent
	}
	reply := strings.TrimSpace(hdr.Get(RDMAReplyHeader))
	switch reply {
	case "":
		// No RDMA on this server: the object came in the body.
		if info.Size != n {
			return RDMAReply{}, fmt.Errorf("token ignored and asked for %d bytes, server offered %d", n, info.Size)
		}
		return RDMAReply{Outcome: RDMATokenIgnored, Body: &exactReader{r: body, left: n}, Status: status}, nil
	case "501":
		if info.Size == 0 {
			body.Close()
			return RDMAReply{Outcome: RDMADeclined501, Status: status}, nil
		}
		if info.Size != n {
			return RDMAReply{}, fmt.Errorf("RDMA declined and asked for %d bytes, server offered %d", n, info.Size)
		}
		return RDMAReply{Outcome: RDMADeclined501, Body: &exactReader{r: body, left: n}, Status: status}, nil
	case "200", "204", "206":
	default:
		return RDMAReply{}, fmt.Errorf("unknown %s %q", RDMAReplyHeader, reply)
	}
	code, _ := strconv.Atoi(reply)
	if err := expectEmpty(body, info.Size); err != nil {
		return RDMAReply{}, err
	}
	body.Close()
	wrote := n
	if s := hdr.Get(RDMABytesHeader); s != "" {
		b, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || b < 0 {
			return RDMAReply{}, fmt.Errorf("bad %s %q", RDMABytesHeader, s)
		}
		if b > n {
			return RDMAReply{}, fmt.Errorf("%s %d for a %d-byte range", RDMABytesHeader, b, n)
		}
		wrote = b
	}
	out := RDMAServed
	if wrote < n {
		out = RDMAShortTransfer
	}
	return RDMAReply{Outcome: out, Bytes: wrote, Status: code}, nil
}

// expectEmpty checks that a served reply has no body: object bytes on a
// reply that also claims RDMA would be counted twice or lost.
func expectEmpty(body io.Reader, size int64) error {
	if size > 0 {
		return fmt.Errorf("%s with a %d-byte body", RDMAReplyHeader, size)
	}
	var one [1]byte
	if k, _ := io.ReadFull(body, one[:]); k > 0 {
		return fmt.Errorf("%s with a body", RDMAReplyHeader)
	}
	return nil
}

// GetRangeRDMA forwards to Inner when it is an RDMAGetter, counting the
// request under op "get_rdma" with its outcome; otherwise it fails with
// ErrNoRDMAGetter without sending anything.
func (s Metered) GetRangeRDMA(ctx context.Context, bucket, key string, off, n int64, v Version, token string) (RDMAReply, error) {
	g, ok := s.Inner.(RDMAGetter)
	if !ok {
		return RDMAReply{}, fmt.Errorf("%w: %T", ErrNoRDMAGetter, s.Inner)
	}
	start := time.Now()
	s.M.BytesInFlight.Add(float64(n))
	rep, err := g.GetRangeRDMA(ctx, bucket, key, off, n, v, token)
	s.M.S3Seconds.WithLabelValues("get_rdma").Observe(time.Since(start).Seconds())
	s.M.S3Requests.WithLabelValues("get_rdma", rdmaOutcomeLabel(rep, err)).Inc()
	if err != nil || rep.Body == nil {
		s.M.BytesInFlight.Sub(float64(n))
		return rep, err
	}
	// The bytes come over HTTP after all: count them as GetRange does.
	rep.Body = &meteredBody{ReadCloser: rep.Body, m: s.M, left: n}
	return rep, nil
}

// rdmaOutcomeLabel is outcome's bounded label, with the RDMA outcomes for
// requests that did not fail.
func rdmaOutcomeLabel(rep RDMAReply, err error) string {
	switch {
	case errors.Is(err, ErrTokenRejected):
		return "token_rejected"
	case err != nil:
		return outcome(err)
	}
	return rep.Outcome.String()
}
