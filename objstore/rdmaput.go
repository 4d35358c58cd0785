package objstore

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// PartTarget names one part of a multipart upload.
type PartTarget struct {
	Bucket, Key, UploadID string
	Number                int
	Size                  int64 // the part's bytes
}

// RDMAPutter is implemented by stores that can send S3-over-RDMA
// UploadParts: the server reads the part's bytes out of the buffer the
// token names, and the request carries none.
type RDMAPutter interface {
	// UploadPartRDMA sends UploadPart of p with token in x-amz-rdma-token,
	// Content-Length 0 and no body, and says how the server answered. A
	// decline is an outcome, not an error; only RDMAServed means the part
	// holds the buffer's p.Size bytes (ETag is then the part's). Any other
	// answer may have stored a part of other bytes (an empty one, a short
	// one) under the number: the caller sends the part again over HTTP,
	// which replaces it.
	UploadPartRDMA(ctx context.Context, p PartTarget, token string) (RDMAPutReply, error)
}

// RDMAPutReply is a server's answer to an UploadPart with a token.
type RDMAPutReply struct {
	Outcome RDMAOutcome
	// Bytes the server says it read out of the buffer.
	Bytes int64
	// ETag of the part, when served.
	ETag   string
	Status int
}

// UploadPartRDMA implements RDMAPutter with one signed request written by
// hand: minio-go hides a part's reply headers, and they say whether the
// server read the bytes. x-amz-content-sha256 is UNSIGNED-PAYLOAD (the
// bytes do not travel in the request) and Content-Length 0 is not signed.
func (m *Minio) UploadPartRDMA(ctx context.Context, p PartTarget, token string) (RDMAPutReply, error) {
	where := p.Bucket + "/" + p.Key
	switch {
	case p.Size <= 0 || p.Number < 1 || p.Number > MaxParts || p.UploadID == "":
		return RDMAPutReply{}, fmt.Errorf("upload part %s: bad part %d of %d bytes (upload %q)", where, p.Number, p.Size, p.UploadID)
	case p.Size > rdmatoken.MaxServerOp:
		return RDMAPutReply{}, fmt.Errorf("upload part %s: %d bytes over RDMA in one request, at most %d", where, p.Size, rdmatoken.MaxServerOp)
	}
	tok, err := rdmatoken.Parse(token)
	if err != nil {
		return RDMAPutReply{}, fmt.Errorf("upload part %s: %w: %w", where, ErrTokenRejected, err)
	}
	if int64(tok.Size) != p.Size {
		// The token's size is what the server reads: it must be the part.
		return RDMAPutReply{}, fmt.Errorf("upload part %s: %w: the token names %d bytes, the part is %d", where, ErrTokenRejected, tok.Size, p.Size)
	}
	req, err := m.signedRequest(ctx, http.MethodPut, p.Bucket, p.Key,
		url.Values{"partNumber": {strconv.Itoa(p.Number)}, "uploadId": {p.UploadID}},
		http.Header{RDMATokenHeader: {token}, "X-Amz-Content-Sha256": {"UNSIGNED-PAYLOAD"}})
	if err != nil {
		return RDMAPutReply{}, fmt.Errorf("upload part %s: %w", where, err)
	}
	resp, err := m.transport.RoundTrip(req)
	if err != nil {
		return RDMAPutReply{}, fmt.Errorf("upload part %s: %w", where, ctxErr(ctx, err))
	}
	defer resp.Body.Close()
	rep, err := readRDMAPutReply(resp, p)
	if err != nil {
		return rep, fmt.Errorf("upload part %s: %w", where, err)
	}
	return rep, nil
}

// signedRequest is a request without a body to the object key, signed
// with SigV4 in its headers over every header given.
func (m *Minio) signedRequest(ctx context.Context, method, bucket, key string, query url.Values, hdr http.Header) (*http.Request, error) {
	ep := m.getCore.EndpointURL()
	u := &url.URL{Scheme: ep.Scheme, Host: ep.Host, Path: "/" + bucket + "/" + key,
		RawPath: "/" + bucket + "/" + s3utils.EncodePath(key), RawQuery: query.Encode()}
	if m.virtualHost {
		u.Host = bucket + "." + ep.Host
		u.Path, u.RawPath = "/"+key, "/"+s3utils.EncodePath(key)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	req.Header.Set("User-Agent", "s3gdsfs")
	req.ContentLength = 0
	creds, err := m.getCore.GetCreds()
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	region, err := m.getCore.GetBucketLocation(ctx, bucket)
	if err != nil {
		return nil, classify(err, bucket, key)
	}
	if creds.AccessKeyID != "" {
		req = signer.SignV4(*req, creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken, region)
	}
	return req, nil
}

// readRDMAPutReply classifies the reply to an UploadPart with a token.
// Never "200 and an ETag" alone: a server that ignored the token stored
// the empty body the request had.
func readRDMAPutReply(resp *http.Response, p PartTarget) (RDMAPutReply, error) {
	status := resp.StatusCode
	if status == http.StatusNotImplemented {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return RDMAPutReply{Outcome: RDMADeclined501, Status: status}, nil
	}
	if status/100 != 2 {
		return RDMAPutReply{Status: status}, putError(resp, p)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	etag := cleanETag(resp.Header.Get("ETag"))
	reply := strings.TrimSpace(resp.Header.Get(RDMAReplyHeader))
	switch reply {
	case "":
		return RDMAPutReply{Outcome: RDMATokenIgnored, Status: status}, nil
	case "501":
		return RDMAPutReply{Outcome: RDMADeclined501, Status: status}, nil
	case "200", "204", "206":
	default:
		return RDMAPutReply{Status: status}, fmt.Errorf("unknown %s %q", RDMAReplyHeader, reply)
	}
	code, _ := strconv.Atoi(reply)
	s := resp.Header.Get(RDMABytesHeader)
	if s == "" {
		// A GET's missing count means the whole range; a part's is not
		// taken on trust: what the server stored is unknown.
		return RDMAPutReply{Status: code}, fmt.Errorf("%s %s without %s: what the part holds is unknown", RDMAReplyHeader, reply, RDMABytesHeader)
	}
	b, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	switch {
	case err != nil || b < 0:
		return RDMAPutReply{Status: code}, fmt.Errorf("bad %s %q", RDMABytesHeader, s)
	case b > p.Size:
		return RDMAPutReply{Status: code}, fmt.Errorf("%s %d for a %d-byte part", RDMABytesHeader, b, p.Size)
	case b < p.Size:
		return RDMAPutReply{Outcome: RDMAShortTransfer, Bytes: b, Status: code}, nil
	case etag == "":
		return RDMAPutReply{Status: code}, fmt.Errorf("served part %d has no ETag", p.Number)
	}
	return RDMAPutReply{Outcome: RDMAServed, Bytes: b, ETag: etag, Status: code}, nil
}

// putError turns an error reply to an UploadPart with a token into a
// decline (501), ErrTokenRejected, or the package's errors.
func putError(resp *http.Response, p PartTarget) error {
	er := errorReply(resp, p.Bucket, p.Key)
	if (er.StatusCode == http.StatusBadRequest || er.StatusCode == http.StatusForbidden) && namesToken(er) {
		return fmt.Errorf("%w (%d %s: %s)", ErrTokenRejected, er.StatusCode, er.Code, er.Message)
	}
	return classifyWrite(er, p.Bucket, p.Key)
}

// UploadPartRDMA forwards to Inner when it is an RDMAPutter, counting the
// request under op "upload_part_rdma" with its outcome; otherwise it fails
// with ErrNoRDMAGetter without sending anything.
func (s Metered) UploadPartRDMA(ctx context.Context, p PartTarget, token string) (RDMAPutReply, error) {
	g, ok := s.Inner.(RDMAPutter)
	if !ok {
		return RDMAPutReply{}, fmt.Errorf("%w: %T", ErrNoRDMAGetter, s.Inner)
	}
	start := time.Now()
	rep, err := g.UploadPartRDMA(ctx, p, token)
	s.M.S3Seconds.WithLabelValues("upload_part_rdma").Observe(time.Since(start).Seconds())
	s.M.S3Requests.WithLabelValues("upload_part_rdma", rdmaOutcomeLabel(RDMAReply{Outcome: rep.Outcome}, err)).Inc()
	return rep, err
}
