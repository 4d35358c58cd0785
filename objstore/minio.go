package objstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// ErrNotS3 means the endpoint answered a listing with a success status but
// not with an S3 listing: a web page (a console, a login or error page of a
// proxy), an S3 <Error> document sent with 200, or a body that is not XML.
// The S3 client would read such a reply as an empty listing.
var ErrNotS3 = errno.New(syscall.EIO, "the endpoint did not answer as S3")

// Config says how to reach the object store.
type Config struct {
	Endpoint string // URL: http(s)://host[:port]
	Region   string
	// CABundle is a PEM file of extra CAs trusted beside the system store.
	CABundle string
	// VirtualHost selects virtual-hosted addressing; custom endpoints default
	// to path-style, which every S3-compatible server speaks.
	VirtualHost bool
	// Credentials; nil means the standard chain (DefaultCredentials).
	Credentials *credentials.Credentials
	// ConnectTimeout bounds dialing; ResponseTimeout bounds waiting for
	// response headers. Both keep an unreachable endpoint from hanging a read.
	ConnectTimeout  time.Duration
	ResponseTimeout time.Duration
	// MaxConns bounds connections kept open to the endpoint.
	MaxConns int
	// MaxRetries is minio-go's retry count for stat and listing requests
	// (1 = no retry). GETs are sent once each: their retries are the
	// reader's (Getter), which bound them by the read timeout.
	MaxRetries int
	// RawReceiveBuffer is the socket receive buffer GetRaw asks for its
	// connection (SO_RCVBUFFORCE, or SO_RCVBUF within net.core.rmem_max
	// without CAP_NET_ADMIN); 0 keeps the system's. A spliced reader's
	// socket buffer is all the server may send ahead of it, and the kernel
	// grows a socket's buffer as an application reads from it, not as it
	// splices from it.
	RawReceiveBuffer int
	// PartCRC32C sends each upload part's body unsigned, with its CRC32C in
	// a trailer, which the server checks: the body is still checked end to
	// end, without the chunk-by-chunk signature (over http) that the
	// server must verify otherwise. Servers that take trailing checksums
	// only (docs/operations.md, "Writes").
	PartCRC32C bool
}

// DefaultCredentials is the standard chain: AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, then ~/.aws/credentials (with
// AWS_PROFILE), then the instance metadata service.
func DefaultCredentials() *credentials.Credentials {
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{Client: &http.Client{Timeout: 3 * time.Second}},
	})
}

// The transport's bounds when Config leaves them 0.
const (
	DefaultConnectTimeout  = 5 * time.Second
	DefaultResponseTimeout = DefaultReadTimeout
)

// Minio is the Store over minio-go.
type Minio struct {
	core *minio.Core
	// getCore sends GETs, each once: minio-go's own retries, under the
	// Getter's, would multiply the bound on a read (docs/operations.md).
	getCore   *minio.Core
	transport *http.Transport
	// For GetRaw, which sends its GETs itself.
	virtualHost     bool
	responseTimeout time.Duration
	dialRaw         DialFunc
	rawConns        *RawConns
	partCRC32C      bool
}

// NewMinio builds the client; it sends nothing until first used.
func NewMinio(cfg Config) (*Minio, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("endpoint %q: want http://host[:port] or https://host[:port]", cfg.Endpoint)
	}
	if u.User != nil {
		// Keys belong in the environment or a credentials file: a URL is
		// logged and shown in errors.
		return nil, fmt.Errorf("endpoint %q: credentials are not allowed in the URL; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a credentials file", u.Redacted())
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("endpoint %q: a path is not allowed; name the bucket with --bucket", cfg.Endpoint)
	}
	transport, err := newTransport(cfg, u.Scheme == "https")
	if err != nil {
		return nil, err
	}
	creds := cfg.Credentials
	if creds == nil {
		creds = DefaultCredentials()
	}
	lookup := minio.BucketLookupPath
	if cfg.VirtualHost {
		lookup = minio.BucketLookupDNS
	}
	retries := cfg.MaxRetries
	if retries <= 0 {
		retries = 3
	}
	opts := minio.Options{
		Creds:        creds,
		Secure:       u.Scheme == "https",
		Transport:    listingCheck{transport},
		Region:       cfg.Region,
		BucketLookup: lookup,
		MaxRetries:   retries,
	}
	core, err := minio.NewCore(u.Host, &opts)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", cfg.Endpoint, err)
	}
	opts.MaxRetries = 1
	getCore, err := minio.NewCore(u.Host, &opts)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", cfg.Endpoint, err)
	}
	return &Minio{core: core, getCore: getCore, transport: transport, virtualHost: cfg.VirtualHost, partCRC32C: cfg.PartCRC32C,
		responseTimeout: transport.ResponseHeaderTimeout,
		dialRaw:         rawDialer(transport.TLSHandshakeTimeout, cfg.RawReceiveBuffer),
		rawConns:        NewRawConns(transport.MaxIdleConnsPerHost, transport.IdleConnTimeout)}, nil
}

func newTransport(cfg Config, secure bool) (*http.Transport, error) {
	connect := cfg.ConnectTimeout
	if connect <= 0 {
		connect = DefaultConnectTimeout
	}
	respond := cfg.ResponseTimeout
	if respond <= 0 {
		respond = DefaultResponseTimeout
	}
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = 256
	}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          maxConns,
		MaxIdleConnsPerHost:   maxConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: respond,
		ExpectContinueTimeout: time.Second,
		// Object bytes are already compressed or binary; gzip would cost CPU
		// and break ranged reads on some servers.
		DisableCompression: true,
		// Large socket reads: fewer syscalls per GB.
		ReadBufferSize: 256 << 10,
	}
	if secure {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if cfg.CABundle != "" {
			pem, err := os.ReadFile(cfg.CABundle)
			if err != nil {
				return nil, fmt.Errorf("--ca-bundle: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ca-bundle %s: no PEM certificates found", cfg.CABundle)
			}
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return t, nil
}

// listingCheck is the S3 client's transport: it looks at the start of every
// successful or refused (4xx) listing reply (ListObjectsV2, ListBuckets, the
// bucket location) and fails the request with ErrNotS3 unless the reply's
// first XML element is the one S3 sends: the listing, or <Error>. The
// client decodes XML into structs that do not name their root element, so
// an HTML page or an <Error> document answered with 200 would otherwise
// decode, silently, as a listing of nothing: an empty bucket at start-up,
// an empty directory at run time; and it takes a 404 page for NoSuchBucket.
type listingCheck struct{ next http.RoundTripper }

// listingPeek is how much of a listing reply is read to find its root
// element: S3 sends it within the first few hundred bytes.
const listingPeek = 4 << 10

func (c listingCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	want := listingRoot(req)
	refused := resp.StatusCode/100 == 4
	if want == "" || (resp.StatusCode/100 != 2 && !refused) {
		return resp, nil // errors are the client's to decode
	}
	if refused {
		// The client reads a 404 or 403 without an S3 <Error> document as
		// NoSuchBucket or AccessDenied: a web server that is not S3 would
		// pass for a missing bucket.
		want = "Error"
	}
	head := make([]byte, listingPeek)
	n, err := io.ReadFull(resp.Body, head)
	head = head[:n]
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		resp.Body.Close()
		return nil, err
	}
	whole := n < listingPeek
	root, found, cut := xmlRoot(head)
	if (found && root == want) || (cut && whole && n > 0) {
		// An S3 listing; or a reply cut short before its first element,
		// which the client's decoding fails on as the transport failure
		// it is.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		return resp, nil
	}
	resp.Body.Close()
	return nil, notS3(resp, head, whole, root, found, want)
}

// listingRoot is the root element a reply to req must have, or "" for a
// request whose reply is not checked.
func listingRoot(req *http.Request) string {
	if req.Method != http.MethodGet {
		return ""
	}
	q := req.URL.Query()
	switch {
	case q.Has("list-type"):
		return "ListBucketResult"
	case q.Has("location"):
		return "LocationConstraint"
	case req.URL.RawQuery == "" && (req.URL.Path == "/" || req.URL.Path == ""):
		return "ListAllMyBucketsResult"
	}
	return ""
}

// xmlRoot is the name of the first element of an XML document's start:
// found is false when the start is not XML or holds no element, and cut
// says the start ended inside XML markup before an element (a body cut
// short, or the peek's end).
func xmlRoot(head []byte) (name string, found, cut bool) {
	d := xml.NewDecoder(bytes.NewReader(head))
	for {
		tok, err := d.Token()
		var syntax *xml.SyntaxError
		switch {
		case err == io.EOF || (errors.As(err, &syntax) && syntax.Msg == "unexpected EOF"):
			return "", false, true
		case err != nil:
			return "", false, false
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return t.Name.Local, true, false
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return "", false, false // text before any element
			}
		}
	}
}

// notS3 says what came instead of an S3 listing.
func notS3(resp *http.Response, head []byte, whole bool, root string, isXML bool, want string) error {
	got := "a body that is not XML"
	switch {
	case len(bytes.TrimSpace(head)) == 0 && whole:
		got = "an empty body"
	case root == "Error" && want != "Error":
		var e struct{ Code, Message string }
		xml.Unmarshal(head, &e) // best effort: the body may be longer than the peek
		got = fmt.Sprintf("an S3 error document (%s: %s)", e.Code, e.Message)
		head = nil // said
	case isXML:
		got = fmt.Sprintf("a <%s> document", root)
	case !whole:
		got = fmt.Sprintf("no XML element in its first %d bytes", listingPeek)
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "none"
	}
	said := fmt.Sprintf("Content-Type %s, with %s", ct, got)
	if len(head) > 0 {
		said += fmt.Sprintf(", starting %q", head[:min(len(head), 40)])
	}
	if server := resp.Header.Get("Server"); server != "" {
		said += fmt.Sprintf(", from server %q", server)
	}
	want = "a " + want
	if want == "a Error" {
		want = "an S3 <Error> document"
	}
	// The S3 client replaces a request error whose text holds "EOF" with
	// one of its own, losing ErrNotS3: leave out the server's words then.
	if strings.Contains(said, "EOF") {
		said = "with a body that is not an S3 listing"
	}
	return fmt.Errorf("%w: a listing request answered %s, %s, instead of %s", ErrNotS3, resp.Status, said, want)
}

// ListBuckets implements Store.
func (m *Minio) ListBuckets(ctx context.Context) ([]string, error) {
	infos, err := m.core.ListBuckets(ctx)
	if err != nil {
		return nil, classify(err, "", "")
	}
	names := make([]string, 0, len(infos))
	for _, b := range infos {
		names = append(names, b.Name)
	}
	return names, nil
}

// CheckBucket implements Store. It lists one key, which proves both that the
// bucket exists and that the credentials may read it.
func (m *Minio) CheckBucket(ctx context.Context, bucket string) error {
	_, err := m.List(ctx, bucket, "", "", 1)
	return err
}

// Stat implements Store.
func (m *Minio) Stat(ctx context.Context, bucket, key string) (Object, error) {
	info, err := m.core.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Object{}, classify(err, bucket, key)
	}
	return Object{Key: key, Version: Version{ETag: cleanETag(info.ETag), Size: info.Size, LastModified: info.LastModified}}, nil
}

// List implements Store.
func (m *Minio) List(ctx context.Context, bucket, prefix, continuation string, maxKeys int) (Page, error) {
	if maxKeys <= 0 {
		maxKeys = 1000
	}
	// Core's listing takes no context: it runs on, bounded by the
	// transport's timeouts, while its caller leaves at the context's end
	// (a start-up check's bound, an interrupted lookup).
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	type listed struct {
		res minio.ListBucketV2Result
		err error
	}
	done := make(chan listed, 1)
	go func() {
		res, err := m.core.ListObjectsV2(bucket, prefix, "", continuation, "/", maxKeys)
		done <- listed{res, err}
	}()
	var res minio.ListBucketV2Result
	var err error
	select {
	case l := <-done:
		res, err = l.res, l.err
	case <-ctx.Done():
		return Page{}, ctx.Err()
	}
	if err != nil {
		return Page{}, classify(err, bucket, prefix)
	}
	page := Page{Objects: make([]Object, 0, len(res.Contents))}
	for _, o := range res.Contents {
		page.Objects = append(page.Objects, Object{Key: o.Key, Version: Version{ETag: cleanETag(o.ETag), Size: o.Size, LastModified: o.LastModified}})
	}
	for _, p := range res.CommonPrefixes {
		page.Prefixes = append(page.Prefixes, p.Prefix)
	}
	if res.IsTruncated {
		page.Next = res.NextContinuationToken
		if page.Next == "" {
			return page, fmt.Errorf("list %s/%s: truncated page without a continuation token", bucket, prefix)
		}
	}
	return page, nil
}

// CloseIdleConnections closes the connections kept for later requests, the
// HTTP client's and GetRaw's, when the client is done with the endpoint;
// requests in flight keep theirs.
func (m *Minio) CloseIdleConnections() {
	m.transport.CloseIdleConnections()
	m.rawConns.CloseIdle()
}

// GetRange implements Store.
func (m *Minio) GetRange(ctx context.Context, bucket, key string, off, n int64, v Version) (io.ReadCloser, error) {
	if n <= 0 || off < 0 {
		return nil, fmt.Errorf("get %s/%s: bad range offset %d length %d", bucket, key, off, n)
	}
	opts, err := pinnedRange(off, n, v)
	if err != nil {
		return nil, err
	}
	body, info, hdr, err := m.getCore.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return nil, classify(err, bucket, key)
	}
	// Servers that ignore conditional headers must still not hand us another
	// version's bytes: check what the reply says it is.
	if err := checkVersion(v, cleanETag(info.ETag), hdr); err != nil {
		body.Close()
		return nil, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	if info.Size != n {
		body.Close()
		return nil, fmt.Errorf("get %s/%s: asked for %d bytes at %d, server offered %d", bucket, key, n, off, info.Size)
	}
	return &exactReader{r: body, left: n}, nil
}

// pinnedRange asks for bytes [off, off+n) of version v only: If-Match with
// its ETag, or If-Unmodified-Since for objects without one.
func pinnedRange(off, n int64, v Version) (minio.GetObjectOptions, error) {
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+n-1); err != nil {
		return opts, err
	}
	if v.ETag != "" {
		return opts, opts.SetMatchETag(v.ETag)
	}
	if !v.LastModified.IsZero() {
		return opts, opts.SetUnmodified(v.LastModified.Add(time.Second))
	}
	return opts, nil
}

func checkVersion(v Version, etag string, hdr http.Header) error {
	if v.ETag != "" && etag != "" && etag != v.ETag {
		return fmt.Errorf("%w: ETag %q, opened as %q", ErrChanged, etag, v.ETag)
	}
	if total, ok := contentRangeTotal(hdr.Get("Content-Range")); ok && total != v.Size {
		return fmt.Errorf("%w: size %d, opened as %d", ErrChanged, total, v.Size)
	}
	if v.ETag == "" && !v.LastModified.IsZero() {
		if lm, err := http.ParseTime(hdr.Get("Last-Modified")); err == nil && !lm.Equal(v.LastModified.Truncate(time.Second)) {
			return fmt.Errorf("%w: Last-Modified %s, opened as %s", ErrChanged, lm.UTC(), v.LastModified.UTC())
		}
	}
	return nil
}

// contentRangeTotal parses the object size out of "bytes a-b/total".
func contentRangeTotal(s string) (int64, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 || s[i+1:] == "*" {
		return 0, false
	}
	total, err := strconv.ParseInt(s[i+1:], 10, 64)
	return total, err == nil
}

func cleanETag(e string) string { return strings.Trim(e, `"`) }

// exactReader turns a body that ends early into io.ErrUnexpectedEOF, so a
// truncated reply is never mistaken for the end of the range.
type exactReader struct {
	r    io.ReadCloser
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		return n, io.ErrUnexpectedEOF
	}
	if e.left == 0 && err == nil {
		return n, nil
	}
	return n, err
}

func (e *exactReader) Close() error { return e.r.Close() }

// classify maps a minio-go error onto the package's sentinels, keeping the
// server's code and message.
func classify(err error, bucket, key string) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	where := bucket
	if key != "" {
		where = bucket + "/" + key
	}
	var sentinel error
	// The server's code first: some servers send a key they do not know
	// with 404 (versitygw's XAdminUserNotFound), which is not a missing
	// object.
	switch {
	case resp.Code == "NoSuchBucket":
		sentinel = ErrNoBucket
	case resp.Code == "NoSuchKey" || resp.Code == "NotFound":
		sentinel = ErrNotFound
	case resp.Code == "PreconditionFailed":
		sentinel = ErrChanged
	case credentialCodes[resp.Code]:
		sentinel = ErrAccessDenied
	case resp.StatusCode == http.StatusNotFound:
		sentinel = ErrNotFound
	case resp.StatusCode == http.StatusPreconditionFailed:
		sentinel = ErrChanged
	case resp.StatusCode == http.StatusForbidden:
		sentinel = ErrAccessDenied
	}
	if sentinel == nil {
		if where == "" { // the bucket listing
			return err
		}
		return fmt.Errorf("%s: %w", where, err)
	}
	if where == "" {
		return fmt.Errorf("%w (%s)", sentinel, describe(resp, err))
	}
	return fmt.Errorf("%s: %w (%s)", where, sentinel, describe(resp, err))
}

// credentialCodes are the S3 error codes that refuse the request's keys or
// what they may do, whatever status they come with.
var credentialCodes = map[string]bool{
	"AccessDenied": true, "AllAccessDisabled": true,
	"InvalidAccessKeyId": true, "XAdminUserNotFound": true,
	"SignatureDoesNotMatch": true, "ExpiredToken": true, "InvalidToken": true,
	"TokenRefreshRequired": true,
}

func describe(resp minio.ErrorResponse, err error) string {
	if resp.Code == "" {
		return err.Error()
	}
	if resp.Message == "" {
		return resp.Code
	}
	return resp.Code + ": " + resp.Message
}
