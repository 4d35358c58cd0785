package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/metrics"
)

// Profiles show what the daemon does to anyone who can connect to the
// metrics listener: they are not found unless the mount asks for them
// (Metrics.Pprof, --pprof); /metrics is served either way.
func TestPprofOnlyWhenAskedFor(t *testing.T) {
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	get := func(srv *httptest.Server, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, pprof := range []bool{false, true} {
		srv := httptest.NewServer(metricsMux(m, pprof))
		if code, body := get(srv, "/metrics"); code != http.StatusOK || !strings.Contains(body, "s3gdsfs_") {
			t.Errorf("pprof %v: /metrics %d %.100q", pprof, code, body)
		}
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
			code, body := get(srv, p)
			switch {
			case !pprof && code != http.StatusNotFound:
				t.Errorf("without pprof: %s answered %d, want 404", p, code)
			case pprof && code != http.StatusOK:
				t.Errorf("with pprof: %s answered %d %.100q, want 200", p, code, body)
			}
		}
		srv.Close()
	}
	if Default().Metrics.Pprof {
		t.Error("profiles served by default")
	}
}
