package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// target is one filesystem under test.
type target struct {
	name string
	// binary is the resolved executable, "" when missing (then skipReason says why).
	binary     string
	skipReason string
	version    string
	// spec builds the daemon's command line for a mountpoint.
	spec func(mountpoint string) mountSpec
}

// whyNotRun says why t cannot be measured now ("" when it can), and says
// so on the progress line: its own reason, no FUSE, or an interrupted run.
func (t *target) whyNotRun(ctx context.Context, fuseOK bool, fuseReason string) string {
	if t.skipReason == "" && !fuseOK {
		t.skipReason = "FUSE unavailable: " + fuseReason
	}
	if t.skipReason == "" && ctx.Err() != nil {
		t.skipReason = "interrupted"
	}
	if t.skipReason != "" {
		progress("%s: skipped: %s", t.name, t.skipReason)
	}
	return t.skipReason
}

func s3gdsfsTarget(bin, extraFlags string, srv *testenv.Server) target {
	t := target{name: "s3gdsfs"}
	abs, err := filepath.Abs(bin)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		t.skipReason = fmt.Sprintf("binary %s not found (%v); run `make build` or pass -bin", bin, err)
		return t
	}
	t.binary = abs
	if fi, err := os.Stat(abs); err == nil {
		t.version = fmt.Sprintf("%s built %s", abs, fi.ModTime().UTC().Format("2006-01-02T15:04:05Z"))
	}
	t.spec = func(mp string) mountSpec {
		return mountSpec{
			argv: append(append([]string{abs, "mount",
				"--endpoint", srv.Endpoint,
				"--bucket", bucketName,
				"--metrics-addr", "127.0.0.1:0"},
				strings.Fields(extraFlags)...), mp),
			env: []string{
				"AWS_ACCESS_KEY_ID=" + srv.AccessKey,
				"AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
				"AWS_REGION=" + srv.Region,
			},
		}
	}
	return t
}

// rcloneTarget streams without a local cache (--vfs-cache-mode off), the
// mode closest to a pure read path.
func rcloneTarget(srv *testenv.Server, workdir string) target {
	t := target{name: "rclone"}
	if t.binary, t.skipReason = lookBinary("rclone", "rclone"); t.binary == "" {
		return t
	}
	t.version = firstLine(t.binary, "version")
	configPath := filepath.Join(workdir, "rclone.conf")
	config := strings.Join([]string{
		"[bench]",
		"type = s3",
		"provider = Other",
		"env_auth = false",
		"access_key_id = " + srv.AccessKey,
		"secret_access_key = " + srv.SecretKey,
		"endpoint = " + srv.Endpoint,
		"region = " + srv.Region,
		"force_path_style = true",
		"",
	}, "\n")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.binary, t.skipReason = "", "writing rclone config: "+err.Error()
		return t
	}
	t.spec = func(mp string) mountSpec {
		return mountSpec{argv: []string{t.binary, "--config", configPath,
			"mount", "bench:" + bucketName, mp,
			"--read-only", "--vfs-cache-mode", "off"}}
	}
	return t
}

// s3fsTarget uses 8 parallel 16 MiB requests, s3fs's own large-read tuning.
func s3fsTarget(srv *testenv.Server, workdir string) target {
	t := target{name: "s3fs"}
	if t.binary, t.skipReason = lookBinary("s3fs", "s3fs"); t.binary == "" {
		return t
	}
	t.version = firstLine(t.binary, "--version")
	passwdPath := filepath.Join(workdir, "s3fs.passwd")
	if err := os.WriteFile(passwdPath, []byte(srv.AccessKey+":"+srv.SecretKey+"\n"), 0o600); err != nil {
		t.binary, t.skipReason = "", "writing s3fs password file: "+err.Error()
		return t
	}
	t.spec = func(mp string) mountSpec {
		opts := strings.Join([]string{
			"url=" + srv.Endpoint,
			"use_path_request_style",
			"passwd_file=" + passwdPath,
			"parallel_count=8",
			"multipart_size=16",
			"ro",
		}, ",")
		return mountSpec{argv: []string{t.binary, bucketName, mp, "-o", opts, "-f"}}
	}
	return t
}

func lookBinary(name, debianPackage string) (path, skipReason string) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Sprintf("%s not installed; run `make bench-deps` (Debian package %s)", name, debianPackage)
	}
	return p, ""
}

// firstLine returns the first output line of a version command.
func firstLine(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return "unknown (" + err.Error() + ")"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
