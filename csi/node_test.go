package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// inNamespaceEnv marks a test run again in a private mount namespace.
const inNamespaceEnv = "S3GDSFS_CSI_TEST_IN_NAMESPACE"

// inPrivateMountNamespace runs the calling test again in a process of
// its own mount namespace, with every mount private (Go's Unshareflags
// makes / MS_PRIVATE|MS_REC), so that the mounts the node makes and what
// a failure leaves are gone with it. It returns true in that process,
// which runs the test's body; the outer test only reports.
func inPrivateMountNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inNamespaceEnv) != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inNamespaceEnv+"=1", binEnv+"="+s3gdsfsBin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the test in a private mount namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the test in a private mount namespace did not pass")
	}
	return false
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func devOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

// TestNodeSharesOneDaemonAcrossPodsAndRestartsIt drives the Node service
// as kubelet does for two pods of one volume: one daemon serves both pods'
// bind mounts byte for byte, one pod leaving keeps it, a killed daemon is
// started again with both mounts working, and the last pod leaving stops
// it. Credentials reach the daemon through its environment only.
func TestNodeSharesOneDaemonAcrossPodsAndRestartsIt(t *testing.T) {
	testenv.RequireFUSE(t)
	if !inPrivateMountNamespace(t) {
		return
	}
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	sums := map[string]string{
		"train/shard-0": srv.PutRandomObject(t, "data", "team/train/shard-0", 9<<20+123, 1),
		"train/shard-1": srv.PutRandomObject(t, "data", "team/train/shard-1", 3<<20, 2),
	}
	n := startNode(t, "--gpu=off")
	ctx := context.Background()
	const id = "data/team"
	staging := filepath.Join(n.dir, "plugins/staging", id)
	podA := filepath.Join(n.dir, "pods/a/volumes/data/mount")
	podB := filepath.Join(n.dir, "pods/b/volumes/data/mount")
	volCtx := map[string]string{"endpoint": srv.Endpoint, "bucket": "data", "prefix": "team",
		"csi.storage.k8s.io/pod.name": "ignored"}
	capability := mountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "meta-ttl=0,allow-writes")

	if _, err := n.client.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: volCtx}); err != nil {
		t.Fatal(err)
	}
	publish := func(target string, readOnly bool) {
		t.Helper()
		if _, err := n.client.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
			TargetPath: target, VolumeCapability: capability, VolumeContext: volCtx, Readonly: readOnly,
			Secrets: secretsOf(srv)}); err != nil {
			t.Fatal(err)
		}
	}
	unpublish := func(target string) {
		t.Helper()
		if _, err := n.client.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(root string) {
		t.Helper()
		for name, want := range sums {
			if got := sha256File(t, filepath.Join(root, name)); got != want {
				t.Fatalf("%s: sha256 %s, want %s", filepath.Join(root, name), got, want)
			}
		}
	}

	publish(podA, false)
	publish(podB, true)
	pid, starts := n.volumes.Daemon(id)
	if pid == 0 || starts != 1 {
		t.Fatalf("after two pods: daemon pid %d, %d starts; want one running daemon", pid, starts)
	}
	readAll(podA)
	readAll(podB)
	if da, db, ds := devOf(t, podA), devOf(t, podB), devOf(t, staging); da != ds || db != ds {
		t.Fatalf("pods' mounts are devices %d and %d, the staging mount %d: not one shared mount", da, db, ds)
	}
	// The volume takes writes (allow-writes): the writer pod's lands, and
	// the read-only pod's bind mount refuses them.
	written := testenv.RandomBytes(3, 0, 1<<20+7)
	if err := os.WriteFile(filepath.Join(podA, "from-a"), written, 0o644); err != nil {
		t.Fatalf("writing through the writer pod's mount: %v", err)
	}
	sums["from-a"] = sha256Hex(written)
	if err := os.WriteFile(filepath.Join(podB, "x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing through the read-only pod's mount: %v, want EROFS", err)
	}
	readAll(podB)

	// The keys are in the daemon's environment, never its arguments or a log.
	cmdline, err := os.ReadFile("/proc/" + itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile("/proc/" + itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cmdline), srv.SecretKey) || strings.Contains(string(cmdline), srv.AccessKey) {
		t.Errorf("the daemon's command line holds a key: %q", cmdline)
	}
	if !strings.Contains(string(environ), "AWS_SECRET_ACCESS_KEY="+srv.SecretKey) {
		t.Errorf("the daemon's environment lacks the Secret's key")
	}

	unpublish(podA)
	if p, _ := n.volumes.Daemon(id); p != pid {
		t.Fatalf("after one of two pods left: daemon pid %d, want %d still serving", p, pid)
	}
	if _, err := os.Stat(podA); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the unpublished target %s is still there: %v", podA, err)
	}
	readAll(podB)

	// A daemon that dies is started again, and the pod's mount re-made.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p, s := n.volumes.Daemon(id); p != 0 && p != pid && s == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new daemon within 60 s of killing %d", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	readAll(podB)
	readAll(staging)
	if err := os.WriteFile(filepath.Join(podB, "x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("the re-made mount of the read-only pod: writing gave %v, want EROFS", err)
	}
	newPid, _ := n.volumes.Daemon(id)

	unpublish(podB)
	if p, _ := n.volumes.Daemon(id); p != 0 {
		t.Fatalf("after the last pod left: daemon %d still running", p)
	}
	if err := syscall.Kill(newPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the daemon %d is still a process after the last pod left: %v", newPid, err)
	}
	if mounted, err := isMountPoint(staging); err != nil || mounted {
		t.Fatalf("the staging path is still a mount after the last pod left (%v)", err)
	}
	if _, err := n.client.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(n.log.String(), srv.SecretKey) {
		t.Errorf("the log holds the secret key")
	}
	if !strings.Contains(n.log.String(), "starting it again") {
		t.Errorf("the log does not say the daemon was started again")
	}
}

// TestNodeRefusesBadMountOptionsByName checks that a PV's mount option
// the command does not know, or one the node plugin owns, is refused as
// InvalidArgument with a message naming it.
func TestNodeRefusesBadMountOptionsByName(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	volCtx := map[string]string{"endpoint": "http://127.0.0.1:1", "bucket": "data"}
	for _, c := range []struct {
		flags []string
		ctx   map[string]string
		want  string
	}{
		{flags: []string{"read-timout=5s"}, want: "read-timout"},
		{flags: []string{"memory-limit=64GiB"}, want: "memory-limit"},
		{flags: []string{"allow-writes,credentials-file=/k"}, want: "credentials-file"},
		{flags: []string{"retries=many"}, want: "retries"},
		{ctx: map[string]string{"endpoint": "http://x", "bucket": "data", "buckt": "y"}, want: "buckt"},
		{ctx: map[string]string{"endpoint": "http://x", "bucket": "Data_1"}, want: "bucket"},
	} {
		id := "vol-" + strings.Join(c.flags, "") + c.want
		staging := filepath.Join(n.dir, "staging", c.want)
		vc := volCtx
		if c.ctx != nil {
			vc = c.ctx
		}
		capability := mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, c.flags...)
		_, err := n.client.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
			VolumeCapability: capability, VolumeContext: vc})
		if err == nil {
			// The command's own option table refuses it, at the start.
			_, err = n.client.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
				TargetPath: filepath.Join(n.dir, "target", c.want), VolumeCapability: capability, VolumeContext: vc})
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("options %q, attributes %v: got %v, want InvalidArgument naming %s", c.flags, vc, err, c.want)
		}
	}
	if _, err := n.client.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: "/s", TargetPath: "/t",
		VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		Secrets:          map[string]string{"aws_secret": "hunter2"}}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "aws_secret") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("an unknown Secret key: got %v, want InvalidArgument naming the key and not its value", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
