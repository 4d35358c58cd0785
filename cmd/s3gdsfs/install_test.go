package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/mountinfo"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// The options mount(8), mount.fuse3 and systemd put in the helper form's
// -o list, which mean nothing to the daemon and must not fail it.
var fstabOnly = []string{
	"defaults", "rw", "ro", "auto", "noauto", "user", "users", "nouser", "owner", "group", "nofail", "_netdev",
	"dev", "nodev", "suid", "nosuid", "exec", "noexec", "noatime", "relatime", "sync", "async",
	"x-systemd.automount", "x-systemd.requires=network-online.target", "x-systemd.mount-timeout=30",
	"x-systemd.idle-timeout=1min", "X-mount.mkdir", "comment=systemd.automount",
}

func TestHelperFormAcceptsFstabOptionsAndNamesUnknownOnes(t *testing.T) {
	list := strings.Join(fstabOnly, ",") + ",endpoint=http://127.0.0.1:1,read_timeout=7s"
	mf, pos, h, err := parseMountCommand([]string{"data/sub", "/mnt/x", "-o", list}, true)
	if err != nil {
		t.Fatalf("-o %s: %v", list, err)
	}
	if mf.bucket != "data/sub" || len(pos) != 1 || pos[0] != "/mnt/x" || mf.foreground || h.fake || h.sloppy {
		t.Fatalf("bucket %q, positional %q, foreground %v, helper flags %+v", mf.bucket, pos, mf.foreground, h)
	}
	if mf.Read.ReadTimeout != 7*time.Second || mf.S3.Endpoint != "http://127.0.0.1:1" {
		t.Fatalf("options not applied: read_timeout %v, endpoint %q", mf.Read.ReadTimeout, mf.S3.Endpoint)
	}
	for _, c := range []struct {
		args []string
		want string // "" for success
		// what the success must give
		bucket string
		fake   bool
	}{
		// mount.fuse3 for "s3gdsfs#" with type fuse passes an empty source.
		{args: []string{"", "/mnt/x", "-o", "bucket=b"}, bucket: "b"},
		{args: []string{"s3gdsfs", "/mnt/x", "-o", "rw"}, bucket: ""},
		{args: []string{"none", "/mnt/x", "-o", "rw,bucket=b"}, bucket: "b"},
		// -o bucket= wins over the source.
		{args: []string{"src", "/mnt/x", "-o", "bucket=b"}, bucket: "b"},
		// mount(8) gives /sbin/mount.fuse.s3gdsfs -s, -f, -n, -v; -t when
		// it runs a helper named otherwise.
		{args: []string{"data", "/mnt/x", "-n", "-v", "-o", "rw"}, bucket: "data"},
		{args: []string{"data", "/mnt/x", "-f", "-o", "rw", "-t", "fuse.s3gdsfs"}, bucket: "data", fake: true},
		{args: []string{"data", "/mnt/x", "-s", "-o", "rw,colour=blue"}, bucket: "data"},
		{args: []string{"data", "/mnt/x", "-o", "rw,colour=blue"}, want: "-o colour: unknown option"},
		{args: []string{"data", "/mnt/x", "-o", "setuid=nobody"}, want: "-o setuid: unknown option"},
		{args: []string{"data", "/mnt/x", "-o", "region"}, want: "-o region: needs a value"},
		{args: []string{"data", "/mnt/x", "-t", "nfs"}, want: "-t nfs"},
		{args: []string{"data", "/mnt/x", "-t"}, want: "-t needs"},
		{args: []string{"data", "/mnt/x", "-N", "123"}, want: "-N"},
	} {
		mf, _, h, err := parseMountCommand(c.args, true)
		switch {
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want an error saying %q", c.args, err, c.want)
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.want == "" && (mf.bucket != c.bucket || h.fake != c.fake):
			t.Errorf("%q: bucket %q fake %v, want %q %v", c.args, mf.bucket, h.fake, c.bucket, c.fake)
		}
	}
	// The mount command's own parse knows no helper flags.
	if _, _, err := parseMountArgs([]string{"-v", "/mnt/x"}, false); err == nil || !strings.Contains(err.Error(), "-v") {
		t.Errorf("mount -v: %v, want an unknown flag", err)
	}
}

func writeCredentials(t *testing.T, path string, mode os.FileMode, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeCredentials(t, good, 0o600, "# keys\n[other]\naws_access_key_id = X\n\n[profile prod]\naws_access_key_id=AKIDPROD\n"+
		"aws_secret_access_key = s3cr3t/prod\naws_session_token = tok\n[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = s3cr3t\n")
	for _, c := range []struct {
		profile, id, token string
	}{{"default", "AKIDDEF", ""}, {"prod", "AKIDPROD", "tok"}} {
		mf, _, err := parseMountArgs([]string{"--endpoint", "http://127.0.0.1:1", "-o", "credentials_file=" + good + ",profile=" + c.profile, "/mnt"}, false)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := mf.config("/mnt", nil)
		if err != nil {
			t.Fatalf("profile %s: %v", c.profile, err)
		}
		v, err := cfg.S3.Credentials.GetWithContext(nil)
		if err != nil || v.AccessKeyID != c.id || v.SessionToken != c.token {
			t.Fatalf("profile %s: keys %q token %q (%v), want %q %q", c.profile, v.AccessKeyID, v.SessionToken, err, c.id, c.token)
		}
	}
	if cfg := mountConfig(t, "--endpoint", "http://127.0.0.1:1"); cfg.S3.Credentials != nil {
		t.Fatal("without --credentials-file the credentials are not the standard chain")
	}

	open := filepath.Join(dir, "open")
	writeCredentials(t, open, 0o640, "[default]\naws_access_key_id = A\naws_secret_access_key = SECRETVALUE\n")
	half := filepath.Join(dir, "half")
	writeCredentials(t, half, 0o600, "[default]\naws_access_key_id = A\n")
	garbage := filepath.Join(dir, "garbage")
	writeCredentials(t, garbage, 0o600, "aws_access_key_id A\n")
	notMine := filepath.Join(dir, "not-mine")
	writeCredentials(t, notMine, 0o600, "[default]\naws_access_key_id = A\naws_secret_access_key = B\n")
	if err := os.Chown(notMine, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "credentials_file=" + open}, "--credentials-file " + open + ": mode 0640 lets group or others at the keys; chmod 600"},
		{[]string{"-o", "credentials_file=" + half}, "needs both aws_access_key_id and aws_secret_access_key"},
		{[]string{"-o", "credentials_file=" + garbage}, "line 1: neither [section] nor key = value"},
		{[]string{"-o", "credentials_file=" + filepath.Join(dir, "missing")}, "--credentials-file " + filepath.Join(dir, "missing") + ": no such file"},
		{[]string{"-o", "credentials_file=" + dir}, "not a regular file"},
		{[]string{"-o", "credentials_file=" + good + ",profile=staging"}, "no [staging] profile"},
		{[]string{"--profile", "prod"}, "--profile prod: only with --credentials-file"},
	} {
		r := runCLI(t, nil, append([]string{"data", "/nonexistent/mp", "--endpoint", "http://127.0.0.1:1"}, c.args...)...)
		if r.Code != exitUsage || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", c.args, r.Code, r.Stderr, exitUsage, c.want)
		}
		if strings.Contains(r.Stderr, "SECRETVALUE") {
			t.Errorf("%q: the secret key is in the message", c.args)
		}
	}
	if os.Geteuid() == 0 {
		// Root reads anyone's file; a key file owned by another user is
		// still refused, since that user could change the keys.
		r := runCLI(t, nil, "data", "/nonexistent/mp", "-o", "endpoint=http://127.0.0.1:1,credentials_file="+notMine)
		if r.Code != exitUsage || !strings.Contains(r.Stderr, "owned by uid 4242") {
			t.Errorf("a key file of uid 4242: exit %d, stderr %q", r.Code, r.Stderr)
		}
	}
}

// A foreground mount under systemd (Type=notify) says READY=1 once the
// mount answers and STOPPING=1 when SIGTERM starts the unmount.
func TestForegroundMountNotifiesSystemd(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "a.txt", []byte("ready\n"))
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mp := t.TempDir()
	cmd := exec.Command(binary, "mount", "-o", "endpoint="+srv.Endpoint+",bucket=data,metrics_addr=off", mp)
	cmd.Env = append(os.Environ(), append(credsEnv(srv), "NOTIFY_SOCKET="+sock)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); syscall.Unmount(mp, syscall.MNT_DETACH) })
	next := func(what string) string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %s on $NOTIFY_SOCKET: %v; stderr: %s", what, err, stderr.String())
		}
		return string(buf[:n])
	}
	if msg := next("READY=1"); !strings.Contains(msg, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", msg)
	}
	// Ready means mounted: the file reads at once.
	if got, err := os.ReadFile(filepath.Join(mp, "a.txt")); err != nil || string(got) != "ready\n" {
		t.Fatalf("read right after READY=1: %q %v", got, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if msg := next("STOPPING=1"); !strings.Contains(msg, "STOPPING=1") {
		t.Fatalf("notification after SIGTERM %q, want STOPPING=1", msg)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
	if isMounted(t, mp) {
		t.Fatal("still mounted after SIGTERM")
	}
}

// repoRoot is the directory of the Makefile.
const repoRoot = "../.."

// TestInstallAndMountAsFstabDoes installs with `make install` into a
// temporary prefix and mounts the way fstab entries are mounted: mount(8)
// with an fstab (-T, as `mount /mnt/x` reads /etc/fstab) through fuse3's
// mount.fuse3, which runs `s3gdsfs SOURCE MOUNTPOINT -o OPTIONS` from PATH;
// the `s3gdsfs#SOURCE` form of type fuse; and the installed
// mount.fuse.s3gdsfs as mount(8) runs it. Every mount reads an object
// through the mount and checks its sha256, then umount(8) unmounts and the
// daemon exits. The keys come from a credentials file, as at boot.
func TestInstallAndMountAsFstabDoes(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, tool := range []string{"make", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	tmp := t.TempDir()
	prefix, sbin := filepath.Join(tmp, "usr"), filepath.Join(tmp, "sbin")
	makeVars := []string{"BIN=" + filepath.Join(tmp, "build", "s3gdsfs"), "PREFIX=" + prefix, "SBINDIR=" + sbin, "INSTALL_PYTHON=no"}
	runMake(t, append([]string{"install"}, makeVars...)...)
	bin := filepath.Join(prefix, "bin", "s3gdsfs")
	helper := filepath.Join(sbin, "mount.fuse.s3gdsfs")
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v %v", fi, err)
	}
	if target, err := os.Readlink(helper); err != nil || target != bin {
		t.Fatalf("%s: links to %q (%v), want %s", helper, target, err, bin)
	}
	unit, err := os.ReadFile(filepath.Join(prefix, "lib", "systemd", "system", "s3gdsfs@.service"))
	if err != nil || !strings.Contains(string(unit), "\nExecStart="+bin+" mount ") || !strings.Contains(string(unit), "\nType=notify\n") {
		t.Fatalf("installed unit (%v):\n%s", err, unit)
	}
	for _, doc := range []string{"README.md", "operations.md", "examples/mnt-data.mount", "examples/s3gdsfs-example.env"} {
		if _, err := os.Stat(filepath.Join(prefix, "share", "doc", "s3gdsfs", doc)); err != nil {
			t.Errorf("installed docs: %v", err)
		}
	}

	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.CreateBucket(t, "stats") // named like a subcommand
	const size = 3<<20 + 12345
	sum := srv.PutRandomObject(t, "data", "dir/blob.bin", size, 7)
	statsSum := srv.PutRandomObject(t, "stats", "s.bin", 4096, 8)
	creds := filepath.Join(tmp, "credentials")
	writeCredentials(t, creds, 0o600, fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.AccessKey, srv.SecretKey))

	// mount(8)'s environment: the installed binary first on PATH, and no
	// keys but the file's.
	env := []string{"PATH=" + filepath.Join(prefix, "bin") + ":" + os.Getenv("PATH"), "AWS_REGION=" + srv.Region}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	opts := "endpoint=" + srv.Endpoint + ",credentials_file=" + creds + ",metrics_addr=off"
	fstabOpts := "rw,nosuid,nodev,_netdev,nofail,noauto,users,noatime,x-systemd.automount,x-systemd.requires=network-online.target," + opts

	check := func(name, mp, file, want string) {
		t.Helper()
		if !isMounted(t, mp) {
			t.Fatalf("%s: %s is not mounted", name, mp)
		}
		if typ := mountType(t, mp); typ != "fuse.s3gdsfs" {
			t.Errorf("%s: type %q in /proc/self/mountinfo, want fuse.s3gdsfs", name, typ)
		}
		f, err := os.Open(filepath.Join(mp, file))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if got := hex.EncodeToString(h.Sum(nil)); err != nil || got != want {
			t.Fatalf("%s: sha256 of %s through the mount %s (%v), want %s", name, file, got, err, want)
		}
	}
	umount := func(name, mp string) {
		t.Helper()
		daemons := processesNaming(mp)
		if len(daemons) == 0 {
			t.Errorf("%s: no daemon process names %s", name, mp)
		}
		runTool(t, env, "umount", mp)
		if isMounted(t, mp) {
			t.Fatalf("%s: still mounted after umount", name)
		}
		waitFor(t, name+": the daemon's exit after umount", func() bool { return len(processesNaming(mp)) == 0 })
	}
	newMountpoint := func() string {
		mp := t.TempDir()
		t.Cleanup(func() {
			syscall.Unmount(mp, syscall.MNT_DETACH)
			for _, pid := range processesNaming(mp) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		return mp
	}

	// mount(8) drops PATH (and HOME) from the helper's environment, so
	// mount.fuse3's shell finds s3gdsfs on its default PATH only, and
	// mount(8) looks for mount.fuse.s3gdsfs in /sbin only. The mounts run
	// in a private mount namespace where the installed directories are
	// bound over /usr/local/bin and /usr/sbin, as if installed there;
	// the reads and umount(8) run in it too.
	nsOut, nsErr := toolOutput(env, "unshare", "--mount", "--propagation", "private", "true")
	fstab := filepath.Join(tmp, "fstab")
	script := func(t *testing.T, mp, bindFrom, bindOver, body string) string {
		t.Helper()
		if nsErr != nil {
			t.Skipf("no private mount namespace to run mount(8) in (unshare --mount: %v: %s)", nsErr, nsOut)
		}
		sh := "set -eu\nmount --bind " + bindFrom + " " + bindOver + "\n" + body
		out, err := toolOutput(append(env, "MP="+mp, "FSTAB="+fstab), "unshare", "--mount", "--propagation", "private", "bash", "-c", sh)
		if err != nil {
			t.Fatalf("in a mount namespace (%v):\n%s\noutput:\n%s", err, sh, out)
		}
		waitFor(t, "the daemon's exit after umount", func() bool { return len(processesNaming(mp)) == 0 })
		return out
	}
	const readAndUmount = `findmnt -n -o FSTYPE "$MP"
sha256sum "$MP/$FILE"
umount "$MP"
! findmnt -n "$MP"
`
	wantRead := func(t *testing.T, name, out, want string) {
		t.Helper()
		t.Logf("%s:\n%s", name, out)
		if !strings.Contains(out, "fuse.s3gdsfs\n") || !strings.Contains(out, want+"  ") {
			t.Fatalf("%s: want type fuse.s3gdsfs and sha256 %s; output:\n%s", name, want, out)
		}
	}
	writeFstab := func(t *testing.T, line string) {
		t.Helper()
		if err := os.WriteFile(fstab, []byte("# s3gdsfs test\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const unknownOption = `if mount -t fuse.s3gdsfs -o "_netdev,colour=blue,$OPTS" data "$MP" 2>&1; then echo MOUNTED; umount "$MP"; fi
`

	haveMountFuse := fileExists("/sbin/mount.fuse3") && fileExists("/sbin/mount.fuse")
	systemHelper := fileExists("/sbin/mount.fuse.s3gdsfs")
	t.Run("fstab through mount.fuse3", func(t *testing.T) {
		if !haveMountFuse {
			t.Skip("fuse3's /sbin/mount.fuse3 (and its link /sbin/mount.fuse) not installed: run `make deps`")
		}
		if systemHelper {
			t.Skip("/sbin/mount.fuse.s3gdsfs is installed on this system: mount(8) runs it for fuse.s3gdsfs, not mount.fuse3")
		}
		mp := newMountpoint()
		writeFstab(t, "data/dir "+mp+" fuse.s3gdsfs "+fstabOpts+" 0 0")
		out := script(t, mp, filepath.Join(prefix, "bin"), "/usr/local/bin", "mount -T \"$FSTAB\" \"$MP\"\nFILE=blob.bin\n"+readAndUmount)
		wantRead(t, "fstab, mount.fuse3", out, sum)
		out = script(t, mp, filepath.Join(prefix, "bin"), "/usr/local/bin", "OPTS="+opts+"\n"+unknownOption)
		if strings.Contains(out, "MOUNTED") || !strings.Contains(out, "-o colour: unknown option") || strings.Contains(out, "blue") {
			t.Fatalf("mount -o colour=blue through mount.fuse3: want a failure naming the option; output:\n%s", out)
		}
	})
	t.Run("fstab type fuse with s3gdsfs#source", func(t *testing.T) {
		if !haveMountFuse {
			t.Skip("fuse3's /sbin/mount.fuse3 (and its link /sbin/mount.fuse) not installed: run `make deps`")
		}
		mp := newMountpoint()
		writeFstab(t, "s3gdsfs#data "+mp+" fuse "+fstabOpts+" 0 0")
		out := script(t, mp, filepath.Join(prefix, "bin"), "/usr/local/bin", "mount -T \"$FSTAB\" \"$MP\"\nFILE=dir/blob.bin\n"+readAndUmount)
		wantRead(t, "fstab, s3gdsfs#data", out, sum)
	})
	t.Run("fstab through the installed mount.fuse.s3gdsfs", func(t *testing.T) {
		// Only the helper is in /usr/sbin here: mount.fuse3 is out of
		// reach, and the binary is at its temporary prefix, on no PATH.
		mp := newMountpoint()
		writeFstab(t, "data "+mp+" fuse.s3gdsfs "+fstabOpts+" 0 0")
		out := script(t, mp, sbin, "/usr/sbin", "mount -T \"$FSTAB\" \"$MP\"\nFILE=dir/blob.bin\n"+readAndUmount)
		wantRead(t, "fstab, mount.fuse.s3gdsfs", out, sum)
		writeFstab(t, "stats "+mp+" fuse.s3gdsfs "+fstabOpts+" 0 0")
		out = script(t, mp, sbin, "/usr/sbin", "mount -T \"$FSTAB\" \"$MP\"\nFILE=s.bin\n"+readAndUmount)
		wantRead(t, "fstab, bucket stats", out, statsSum)
		out = script(t, mp, sbin, "/usr/sbin", "OPTS="+opts+"\n"+unknownOption)
		if strings.Contains(out, "MOUNTED") || !strings.Contains(out, "-o colour: unknown option") || strings.Contains(out, "blue") {
			t.Fatalf("mount -o colour=blue through mount.fuse.s3gdsfs: want a failure naming the option; output:\n%s", out)
		}
	})
	t.Run("installed mount.fuse.s3gdsfs as mount(8) runs it", func(t *testing.T) {
		mp := newMountpoint()
		runTool(t, env, helper, "data", mp, "-n", "-v", "-o", fstabOpts)
		check("mount.fuse.s3gdsfs", mp, "dir/blob.bin", sum)
		umount("mount.fuse.s3gdsfs", mp)
		// A bucket named like a subcommand is a source to the helper.
		runTool(t, env, helper, "stats", mp, "-o", fstabOpts)
		check("mount.fuse.s3gdsfs stats", mp, "s.bin", statsSum)
		umount("mount.fuse.s3gdsfs stats", mp)
		// mount -f checks and mounts nothing.
		runTool(t, env, helper, "data", mp, "-f", "-o", fstabOpts)
		if isMounted(t, mp) {
			t.Fatal("mounted with -f")
		}
		out, err := toolOutput(env, helper, "data", mp, "-o", "nofail,cache=yes,"+opts)
		if err == nil || !strings.Contains(out, "-o cache: unknown option") || strings.Contains(out, "yes") {
			t.Fatalf("-o cache=yes: %v, %q; want a failure naming it", err, out)
		}
	})

	runMake(t, append([]string{"uninstall"}, makeVars...)...)
	for _, p := range []string{bin, helper, filepath.Join(prefix, "lib", "systemd", "system", "s3gdsfs@.service"), filepath.Join(prefix, "lib", "libs3gdsfs_cufile.so"), filepath.Join(prefix, "share", "doc", "s3gdsfs")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there after make uninstall", p)
		}
	}
}

// TestInstallHonoursDestdir: make install DESTDIR=D puts everything under
// D, the helper linking to the binary's final path.
func TestInstallHonoursDestdir(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make not found: %v", err)
	}
	tmp := t.TempDir()
	dest := filepath.Join(tmp, "dest")
	vars := []string{"BIN=" + filepath.Join(tmp, "build", "s3gdsfs"), "DESTDIR=" + dest, "INSTALL_PYTHON=no"}
	runMake(t, append([]string{"install"}, vars...)...)
	if fi, err := os.Stat(filepath.Join(dest, "usr/local/bin/s3gdsfs")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("binary under DESTDIR: %v %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(dest, "sbin/mount.fuse.s3gdsfs")); err != nil || target != "/usr/local/bin/s3gdsfs" {
		t.Fatalf("helper link under DESTDIR: %q %v, want /usr/local/bin/s3gdsfs", target, err)
	}
	for _, p := range []string{"usr/local/lib/systemd/system/s3gdsfs@.service", "usr/local/share/doc/s3gdsfs/operations.md", "usr/local/lib/libs3gdsfs_cufile.so"} {
		if _, err := os.Stat(filepath.Join(dest, p)); err != nil {
			t.Errorf("under DESTDIR: %v", err)
		}
	}
	runMake(t, append([]string{"uninstall"}, vars...)...)
	var left []string
	filepath.Walk(dest, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("left after make uninstall: %q", left)
	}
}

func runMake(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "make", append([]string{"-C", repoRoot}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("make %q: %v\n%s", args, err, out)
	}
}

func toolOutput(env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func runTool(t *testing.T, env []string, name string, args ...string) {
	t.Helper()
	if out, err := toolOutput(env, name, args...); err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// mountType is the filesystem type of the mount at dir.
func mountType(t *testing.T, dir string) string {
	t.Helper()
	at, err := mountinfo.At(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(at) == 0 {
		return ""
	}
	return at[len(at)-1].FSType
}

// processesNaming lists the processes with arg among their arguments.
func processesNaming(arg string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// `s3gdsfs mount --foreground=false` goes to the background as the helper
// form does: the child runs the mount command again, not the helper form.
func TestMountCommandInTheBackground(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "a.txt", []byte("background\n"))
	mp := t.TempDir()
	r := runCLI(t, credsEnv(srv), "mount", "--foreground=false", "--endpoint", srv.Endpoint, "--bucket", "data", "--metrics-addr", "off", mp)
	if r.Code != 0 {
		t.Fatalf("mount --foreground=false: exit %d, stderr %q", r.Code, r.Stderr)
	}
	t.Cleanup(func() {
		syscall.Unmount(mp, syscall.MNT_DETACH)
		for _, pid := range processesNaming(mp) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if got, err := os.ReadFile(filepath.Join(mp, "a.txt")); err != nil || string(got) != "background\n" {
		t.Fatalf("read: %q %v", got, err)
	}
	if err := syscall.Unmount(mp, 0); err != nil {
		t.Fatalf("umount: %v", err)
	}
	waitFor(t, "the daemon's exit after umount", func() bool { return len(processesNaming(mp)) == 0 })
}
