package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// The binary, the ABI and the Python package have one version, VERSION,
// which the Makefile stamps into the binary; its first number is the ABI's.
func TestOneVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(want) {
		t.Fatalf("VERSION %q: want MAJOR.MINOR.PATCH", want)
	}
	if major, _, _ := strings.Cut(want, "."); major != strconv.Itoa(abi.Version) {
		t.Errorf("VERSION %s: its first number is not the ABI's, %d", want, abi.Version)
	}
	py, err := os.ReadFile(filepath.Join(repoRoot, "client", "python", "s3gds", "_version.py"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^__version__ = "([^"]*)"`).FindSubmatch(py); m == nil || string(m[1]) != want {
		t.Errorf("client/python/s3gds/_version.py says %q, VERSION %s", m, want)
	}
	ldflags, err := exec.Command("make", "-s", "-C", repoRoot, "print-go-ldflags").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "s3gdsfs")
	if out, err := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build with the Makefile's flags: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "s3gdsfs "+want) || !strings.Contains(string(out), "ABI "+strconv.Itoa(abi.Version)) {
		t.Errorf("s3gdsfs version: %q, %v; want s3gdsfs %s ... ABI %d", out, err, want, abi.Version)
	}
}

// `make help` names every target the Makefile has.
func TestMakeHelpNamesEveryTarget(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command("make", "-s", "-C", repoRoot, "help").Output()
	if err != nil {
		t.Fatal(err)
	}
	words := map[string]bool{}
	for _, w := range strings.Fields(string(help)) {
		words[w] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(mk), -1) {
		if target := m[1]; !words[target] && target != "all" && target != "help" && target != "print-go-ldflags" {
			t.Errorf("make help does not name %s", target)
		}
	}
}

// Every relative link in the docs make install puts in DOCDIR leads to a
// file it installed.
func TestInstalledDocsLinksResolve(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make not found: %v", err)
	}
	tmp := t.TempDir()
	dest := filepath.Join(tmp, "dest")
	runMake(t, "install", "BIN="+filepath.Join(tmp, "build", "s3gdsfs"), "DESTDIR="+dest, "INSTALL_PYTHON=no")
	docdir := filepath.Join(dest, "usr/local/share/doc/s3gdsfs")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	n := 0
	filepath.Walk(docdir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, _ := os.ReadFile(p)
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
				rel, _ := filepath.Rel(docdir, p)
				t.Errorf("%s links to %s, which is not installed", rel, target)
			}
		}
		return nil
	})
	if n == 0 {
		t.Fatalf("no links found in the installed docs under %s", docdir)
	}
}

// --help is on stdout, for a pager, everywhere; a usage mistake is on stderr.
func TestHelpIsOnStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {"mount", "--help"}, {"stats", "--help"}} {
		r := runCLI(t, nil, args...)
		if r.Code != 0 || !strings.Contains(r.Stdout, "usage:") || r.Stderr != "" {
			t.Errorf("s3gdsfs %s: exit %d, stdout %d bytes, stderr %q; want the usage on stdout alone", strings.Join(args, " "), r.Code, len(r.Stdout), r.Stderr)
		}
	}
	if r := runCLI(t, nil); r.Code != exitUsage || r.Stdout != "" || !strings.Contains(r.Stderr, "usage:") {
		t.Errorf("s3gdsfs alone: exit %d, stdout %q; want the usage on stderr and exit %d", r.Code, r.Stdout, exitUsage)
	}
}

// A mount that has written shows its writes in `s3gdsfs stats`: bytes by
// path and how the uploads ended; one that has not keeps the table short.
func TestStatsTableShowsWrites(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp := t.TempDir()
	var stderr testenv.SyncBuffer
	startMount(t, srv, mp, &stderr, "--allow-writes")
	if r := runCLI(t, nil, "stats", mp); r.Code != 0 || strings.Contains(r.Stdout, "written, by path") {
		t.Fatalf("stats before any write: exit %d, says writes:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	body := bytes.Repeat([]byte("checkpoint "), 1000)
	if err := os.WriteFile(filepath.Join(mp, "ckpt.bin"), body, 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	r := runCLI(t, nil, "stats", mp)
	if r.Code != 0 {
		t.Fatalf("stats: exit %d, %s", r.Code, r.Stderr)
	}
	t.Logf("stats:\n%s", r.Stdout)
	for _, want := range []string{
		"written, by path",
		"write(2)               10.7 KiB",
		"GPU writes over HTTP   0 B",
		"uploads                1 completed, 0 aborted, 0 in flight; 0 requests retried",
		"RDMA parts declined    none",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("stats does not say %q", want)
		}
	}
}

// `s3gdsfs stats` is a short table: bytes by path, errors by kind, GPU
// declines, memory against its limit; --json is the attributes as they
// are; --watch prints it again.
func TestStatsTable(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "hello.txt", []byte("hello\n"))
	mp := t.TempDir()
	var stderr testenv.SyncBuffer
	startMount(t, srv, mp, &stderr, "--memory-limit", "64MiB")
	if b, err := os.ReadFile(filepath.Join(mp, "hello.txt")); err != nil || string(b) != "hello\n" {
		t.Fatalf("read: %q, %v", b, err)
	}
	os.Stat(filepath.Join(mp, "absent")) // not an error: the store's answer

	r := runCLI(t, nil, "stats", mp)
	if r.Code != 0 {
		t.Fatalf("stats: exit %d, %s", r.Code, r.Stderr)
	}
	t.Logf("stats:\n%s", r.Stdout)
	for _, want := range []string{
		"POSIX reads            6 B in 1 reads",
		"GPU reads over HTTP    0 B in 0 reads",
		"errors, by kind",
		"S3 requests            none",
		"declined               none",
		"of 64.0 MiB",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("stats does not say %q", want)
		}
	}
	if n := strings.Count(r.Stdout, "\n"); n > 30 {
		t.Errorf("stats is %d lines, want a short table", n)
	}
	file := runCLI(t, nil, "stats", filepath.Join(mp, "hello.txt"))
	if file.Code != 0 || !strings.Contains(file.Stdout, "data/hello.txt: 6 B") || !strings.Contains(file.Stdout, "6 B in 1 reads") {
		t.Errorf("stats of the file: exit %d:\n%s%s", file.Code, file.Stdout, file.Stderr)
	}

	js := runCLI(t, nil, "stats", "--json", mp)
	var raw map[string]map[string]any
	if err := json.Unmarshal([]byte(js.Stdout), &raw); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, js.Stdout)
	}
	if raw[abi.XattrStats]["posix_read_bytes_total"] != 6.0 || raw[abi.XattrCaps]["abi_version"] != float64(abi.Version) {
		t.Errorf("stats --json: %v", raw)
	}

	// --watch, after the path: printed again until stopped.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "stats", mp, "--watch", "0.2")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 64<<10)
	for strings.Count(string(buf), "(Ctrl-C to stop)") < 2 {
		chunk := make([]byte, 4096)
		n, err := out.Read(chunk)
		if err != nil {
			t.Fatalf("stats --watch ended: %v\n%s", err, buf)
		}
		buf = append(buf, chunk[:n]...)
	}
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if strings.Count(string(buf), "POSIX reads") < 2 {
		t.Errorf("stats --watch printed the table fewer than twice:\n%s", buf)
	}
}
