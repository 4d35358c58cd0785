package csi

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// TestCSISanityOnRealMounts runs the kubernetes-csi sanity suite against
// the driver: every Node call it makes mounts the real command on a real
// FUSE mount of versitygw, and the Controller provisions prefixes of a
// real bucket.
func TestCSISanityOnRealMounts(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "sanity")
	n := startNode(t, "--gpu=off")

	secrets := filepath.Join(n.dir, "secrets.yaml")
	var y strings.Builder
	for _, k := range []string{"NodeStageVolumeSecret", "NodePublishVolumeSecret"} {
		fmt.Fprintf(&y, "%s:\n  AWS_ACCESS_KEY_ID: %q\n  AWS_SECRET_ACCESS_KEY: %q\n", k, srv.AccessKey, srv.SecretKey)
	}
	if err := os.WriteFile(secrets, []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + n.sock
	cfg.TargetPath = filepath.Join(n.dir, "target")
	cfg.StagingPath = filepath.Join(n.dir, "staging")
	cfg.SecretsFile = secrets
	cfg.TestVolumeParameters = map[string]string{"endpoint": srv.Endpoint, "bucket": "sanity", "basePrefix": "claims"}
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)

	if strings.Contains(n.log.String(), srv.SecretKey) {
		t.Errorf("the driver's or a daemon's log holds the secret key")
	}
	if !strings.Contains(n.log.String(), "daemon mounted") {
		t.Errorf("no daemon was mounted: the suite's node calls did not reach the command")
	}
}
