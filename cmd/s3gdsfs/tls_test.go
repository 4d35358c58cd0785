package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// tlsFront is an https endpoint in front of srv, with its self-signed
// certificate (for 127.0.0.1 and example.com, not localhost) in a PEM file.
func tlsFront(t *testing.T, srv *testenv.Server) (endpoint, caFile string) {
	t.Helper()
	target, _ := url.Parse(srv.Endpoint)
	ts := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	ts.StartTLS()
	t.Cleanup(ts.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return ts.URL, caFile
}

// $AWS_CA_BUNDLE, the SDKs' variable, is the CA bundle when --ca-bundle is
// not given; --ca-bundle wins over it.
func TestCABundleFromEnvironment(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	ep, ca := tlsFront(t, srv)
	mp := t.TempDir()
	junk := filepath.Join(t.TempDir(), "junk.pem")
	os.WriteFile(junk, []byte("not a certificate"), 0o644)
	args := []string{"mount", "--endpoint", ep, "--bucket", "nope", "--metrics-addr", "off", mp}

	// The bundle from the environment is trusted: the handshake passes and the
	// mount fails only on the bucket.
	r := runCLI(t, append(credsEnv(srv), "AWS_CA_BUNDLE="+ca), args...)
	if r.Code != exitFailure || !strings.Contains(r.Stderr, `bucket "nope" does not exist`) {
		t.Fatalf("AWS_CA_BUNDLE=%s: exit %d, stderr %q; want the TLS handshake to pass", ca, r.Code, r.Stderr)
	}
	// A junk bundle from the environment is refused naming it.
	r = runCLI(t, append(credsEnv(srv), "AWS_CA_BUNDLE="+junk), args...)
	if r.Code != exitFailure || !strings.Contains(r.Stderr, junk) {
		t.Fatalf("AWS_CA_BUNDLE=%s: exit %d, stderr %q; want it refused by name", junk, r.Code, r.Stderr)
	}
	// --ca-bundle wins over the environment.
	r = runCLI(t, append(credsEnv(srv), "AWS_CA_BUNDLE="+junk), append([]string{"mount", "--ca-bundle", ca}, args[1:]...)...)
	if r.Code != exitFailure || !strings.Contains(r.Stderr, `bucket "nope" does not exist`) {
		t.Fatalf("--ca-bundle with a junk AWS_CA_BUNDLE: exit %d, stderr %q; want --ca-bundle used", r.Code, r.Stderr)
	}
}

// A TLS failure's message fits its cause: an unknown CA suggests
// --ca-bundle, a hostname mismatch names the names, and a bundle that does
// not hold the signer says so.
func TestTLSFailuresSayWhy(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	ep, ca := tlsFront(t, srv)
	mp := t.TempDir()
	run := func(endpoint string, extra ...string) string {
		t.Helper()
		args := append([]string{"mount", "--endpoint", endpoint, "--bucket", "data", "--metrics-addr", "off"}, extra...)
		r := runCLI(t, append(credsEnv(srv), "AWS_CA_BUNDLE="), append(args, mp)...)
		if r.Code != exitFailure {
			t.Fatalf("%v: exit %d, stderr %q; want a failure", args, r.Code, r.Stderr)
		}
		return r.Stderr
	}
	if msg := run(ep); !strings.Contains(msg, "a private CA? pass it with --ca-bundle") {
		t.Errorf("unknown CA: %q does not suggest --ca-bundle", msg)
	}
	local := strings.Replace(ep, "127.0.0.1", "localhost", 1)
	msg := run(local, "--ca-bundle", ca)
	if strings.Contains(msg, "private CA") || !strings.Contains(msg, "certificate is for example.com") || !strings.Contains(msg, "not localhost") {
		t.Errorf("hostname mismatch with --ca-bundle: %q does not name the certificate's names and the endpoint's host", msg)
	}
	// A bundle with some other CA: the bundle was given and does not help.
	other := filepath.Join(t.TempDir(), "other.pem")
	os.WriteFile(other, selfSignedCA(t), 0o644)
	msg = run(ep, "--ca-bundle", other)
	if strings.Contains(msg, "a private CA?") || !strings.Contains(msg, other) {
		t.Errorf("a bundle without the signer: %q does not name the bundle as not holding it", msg)
	}
}

// selfSignedCA is the PEM of a CA that signed nothing.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
