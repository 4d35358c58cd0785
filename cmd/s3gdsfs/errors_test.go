package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// A mount that cannot start says what answered and what to change: a web
// server that is not S3 is not a missing bucket, an unknown key is not a
// missing object, no keys at all names the sources tried, and a metrics
// port in use names the way out. Against versitygw and plain HTTP servers.
func TestStartupErrorsNameTheirCause(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp := t.TempDir()

	page404 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Server", "nginx")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("<html><head><title>404 Not Found</title></head><body>nothing here</body></html>\n"))
	}))
	t.Cleanup(page404.Close)
	plain404 := httptest.NewServer(http.NotFoundHandler()) // "404 page not found", text/plain
	t.Cleanup(plain404.Close)
	page403 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte("<html><body>Forbidden by the proxy</body></html>\n"))
	}))
	t.Cleanup(page403.Close)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })

	// No keys anywhere: an empty environment, a home without ~/.aws.
	home := t.TempDir()
	noKeys := []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_ACCESS_KEY=", "AWS_SECRET_KEY=",
		"AWS_SESSION_TOKEN=", "AWS_SHARED_CREDENTIALS_FILE=", "AWS_CONFIG_FILE=", "AWS_PROFILE=", "HOME=" + home,
		"AWS_WEB_IDENTITY_TOKEN_FILE=", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=", "AWS_CONTAINER_CREDENTIALS_FULL_URI=",
		"AWS_REGION=" + srv.Region}
	unknownFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(unknownFile, []byte("[default]\naws_access_key_id = nobody\naws_secret_access_key = "+srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mount := func(endpoint string, extra ...string) []string {
		return append(append([]string{"mount", "--endpoint", endpoint, "--metrics-addr", "off"}, extra...), mp)
	}
	withKeys := func(id, secret string) []string {
		return append(append([]string{}, noKeys...), "AWS_ACCESS_KEY_ID="+id, "AWS_SECRET_ACCESS_KEY="+secret)
	}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"a web server's 404 page, one bucket", credsEnv(srv), mount(page404.URL, "--bucket", "data"),
			[]string{"(--endpoint) did not answer as S3", "404 Not Found", "Content-Type text/html", `server "nginx"`, "instead of an S3 <Error> document"}},
		{"a web server's 404 page, every bucket", credsEnv(srv), mount(page404.URL),
			[]string{"(--endpoint) did not answer as S3", "404 Not Found", "Content-Type text/html"}},
		{"a plain-text 404", credsEnv(srv), mount(plain404.URL, "--bucket", "data"),
			[]string{"(--endpoint) did not answer as S3", "404 Not Found", "Content-Type text/plain", "404 page not found"}},
		{"a proxy's 403 page", credsEnv(srv), mount(page403.URL, "--bucket", "data"),
			[]string{"(--endpoint) did not answer as S3", "403 Forbidden", "Forbidden by the proxy"}},
		{"an unknown access key, one bucket", withKeys("nobody", srv.SecretKey), mount(srv.Endpoint, "--bucket", "data"),
			[]string{`does not know the access key ID "nobody"`, "from the environment, AWS_ACCESS_KEY_ID", "XAdminUserNotFound"}},
		{"an unknown access key, every bucket", withKeys("nobody", srv.SecretKey), mount(srv.Endpoint),
			[]string{`does not know the access key ID "nobody"`, "from the environment, AWS_ACCESS_KEY_ID"}},
		{"an unknown access key in a credentials file", noKeys, mount(srv.Endpoint, "--bucket", "data", "--credentials-file", unknownFile),
			[]string{`does not know the access key ID "nobody"`, "--credentials-file"}},
		{"a wrong secret key", withKeys(srv.AccessKey, "wrong-secret-value"), mount(srv.Endpoint, "--bucket", "data"),
			[]string{"refused the signature of the access key ID", "the secret key does not match", "SignatureDoesNotMatch"}},
		{"no credentials anywhere", noKeys, mount(srv.Endpoint, "--bucket", "data"),
			[]string{"no credentials were found", "the requests went unsigned", "the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
				filepath.Join(home, ".aws", "credentials") + " (profile default)", "IAM", "--credentials-file"}},
		{"a missing bucket", credsEnv(srv), mount(srv.Endpoint, "--bucket", "nope"), []string{`bucket "nope" does not exist`, "(--bucket)"}},
		{"a metrics port in use", credsEnv(srv), []string{"mount", "--endpoint", srv.Endpoint, "--bucket", "data", "--metrics-addr", taken.Addr().String(), mp},
			[]string{"--metrics-addr " + taken.Addr().String(), "address already in use", "--metrics-addr off"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, c.env, c.args...)
			t.Logf("stderr: %s", r.Stderr)
			if r.Code != exitFailure {
				t.Fatalf("exit %d, want %d", r.Code, exitFailure)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("stderr does not say %q", w)
				}
			}
			// The causes these used to be mistaken for.
			for _, wrong := range []string{`bucket "" does not exist`, "object not found"} {
				if strings.Contains(r.Stderr, wrong) {
					t.Errorf("stderr says %q", wrong)
				}
			}
			if c.name != "a missing bucket" && strings.Contains(r.Stderr, "does not exist") {
				t.Errorf("stderr blames a missing bucket")
			}
			if strings.Contains(r.Stderr, srv.SecretKey) || strings.Contains(r.Stderr, "wrong-secret-value") {
				t.Errorf("a secret key appeared in the output")
			}
		})
	}
}
