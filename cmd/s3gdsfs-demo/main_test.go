package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/cli"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "s3gdsfs-demo-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "s3gdsfs-demo")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// runDemo runs the program with a hard bound: a hang is a failure.
func runDemo(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("s3gdsfs-demo %v did not finish within 60s", args)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, stdout.String(), stderr.String()}
}

func TestDemoRunsEndToEnd(t *testing.T) {
	testenv.RequireFUSE(t)
	r := runDemo(t, "--once", "--big-size", "24MiB", "--metrics-addr", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"byte-exact", "s3gdsfs_posix_read_bytes_total", "models/checkpoint.bin",
		"via rdma", "decline: server_501", `"server_501":1`, "loopback"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout+r.stderr, demoSecret) {
		t.Error("the demo printed its secret key")
	}
	// The forced decline says it is deliberate, not a failure.
	if !regexp.MustCompile(`decline: server_501 \(deliberate[^\n]*fallback`).MatchString(r.stdout) {
		t.Errorf("the forced server_501 decline does not say it is deliberate:\n%s", r.stdout)
	}
	// The tree's top line is the mount with every file under it; counts are
	// of the files under each directory, "1 file" in the singular.
	for _, re := range []string{`(?m)^    /\S+/mnt/  203 files, `, `(?m)^      train/  200 files, `, `(?m)^      deep/  1 file, 18 B$`, `(?m)^      models/  1 file, 24\.0 MiB$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("demo tree lacks %s:\n%s", re, r.stdout)
		}
	}
	if strings.Contains(r.stdout, " 1 files") || strings.Contains(r.stdout, " 0 files") {
		t.Errorf("demo tree says \"1 files\" or a directory with 0 files:\n%s", r.stdout)
	}
	// With --once nothing is left at the metrics address when it is printed.
	if strings.Contains(r.stdout, "Prometheus metrics") {
		t.Errorf("demo --once printed the metrics address as it exits:\n%s", r.stdout)
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
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "s3gdsfs-demo: ") {
			t.Errorf("s3gdsfs-demo %v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, cli.ExitUsage, c.want)
		}
	}
}
