package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/cli"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	var err error
	if binary, err = testenv.BuildProgram("s3gdsfs-demo"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(filepath.Dir(binary))
	os.Exit(code)
}

// runDemo runs the program with a hard bound: a hang is a failure.
func runDemo(t *testing.T, args ...string) testenv.Run {
	t.Helper()
	return testenv.RunProgram(t, binary, nil, args...)
}

func TestDemoRunsEndToEnd(t *testing.T) {
	testenv.RequireFUSE(t)
	r := runDemo(t, "--once", "--big-size", "24MiB", "--metrics-addr", "127.0.0.1:0")
	if r.Code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, want := range []string{"byte-exact", "s3gdsfs_posix_read_bytes_total", "models/checkpoint.bin",
		"via rdma", "decline: server_501", `"server_501":1`, "loopback"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout+r.Stderr, demoSecret) {
		t.Error("the demo printed its secret key")
	}
	// The forced decline says it is deliberate, not a failure.
	if !regexp.MustCompile(`decline: server_501 \(deliberate[^\n]*fallback`).MatchString(r.Stdout) {
		t.Errorf("the forced server_501 decline does not say it is deliberate:\n%s", r.Stdout)
	}
	// The tree's top line is the mount with every file under it; counts are
	// of the files under each directory, "1 file" in the singular.
	for _, re := range []string{`(?m)^    /\S+/mnt/  203 files, `, `(?m)^      train/  200 files, `, `(?m)^      deep/  1 file, 18 B$`, `(?m)^      models/  1 file, 24\.0 MiB$`} {
		if !regexp.MustCompile(re).MatchString(r.Stdout) {
			t.Errorf("demo tree lacks %s:\n%s", re, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, " 1 files") || strings.Contains(r.Stdout, " 0 files") {
		t.Errorf("demo tree says \"1 files\" or a directory with 0 files:\n%s", r.Stdout)
	}
	// With --once nothing is left at the metrics address when it is printed.
	if strings.Contains(r.Stdout, "Prometheus metrics") {
		t.Errorf("demo --once printed the metrics address as it exits:\n%s", r.Stdout)
	}
}

// Mistakes in the command line are usage errors naming the flag, before
// anything is started.
func TestDemoRefusesBadUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--big-size", "0"}, "--big-size 0: between 1 byte and 5GiB"},
		{[]string{"--big-size", "lots"}, "big-size"},
		{[]string{"--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"extra"}, "s3gdsfs-demo takes no arguments"},
	} {
		r := runDemo(t, c.args...)
		if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, c.want) || !strings.Contains(r.Stderr, "s3gdsfs-demo: ") {
			t.Errorf("s3gdsfs-demo %v: exit %d, stderr %q; want exit %d and %q", c.args, r.Code, r.Stderr, cli.ExitUsage, c.want)
		}
	}
}
