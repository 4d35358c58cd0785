package csi

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// s3gdsfsBin is the real command the volumes' daemons run, built once.
var s3gdsfsBin string

// binEnv hands the built command to a test run again in a private mount
// namespace, which need not build it again.
const binEnv = "S3GDSFS_CSI_TEST_BINARY"

func TestMain(m *testing.M) {
	built := false
	if s3gdsfsBin = os.Getenv(binEnv); s3gdsfsBin == "" {
		var err error
		if s3gdsfsBin, err = testenv.BuildPackage("s3gdsfs", "github.com/s3gdsfs/s3gdsfs/cmd/s3gdsfs"); err != nil {
			panic(err)
		}
		built = true
	}
	code := m.Run()
	if built {
		os.RemoveAll(filepath.Dir(s3gdsfsBin))
	}
	os.Exit(code)
}

// node is a driver serving on a unix socket in a temporary directory,
// with a client connected to it as kubelet is.
type node struct {
	dir     string
	sock    string
	log     *testenv.SyncBuffer
	volumes *Volumes
	client  csi.NodeClient
	ctrl    csi.ControllerClient
}

// startNode serves the Node (and Controller) services; its daemons run
// the real command with mountFlags before each volume's options.
func startNode(t *testing.T, mountFlags ...string) *node {
	t.Helper()
	n := &node{dir: t.TempDir(), log: &testenv.SyncBuffer{}}
	log := slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n.volumes = NewVolumes(Launcher{
		Binary:     s3gdsfsBin,
		Flags:      append([]string{"--log-level", "debug"}, mountFlags...),
		JournalDir: filepath.Join(n.dir, "journal"),
		Output:     n.log,
		Log:        log,
	})
	d := New(Config{NodeID: "node-1", Volumes: n.volumes, Controller: true, MaxVolumes: 8, Log: log})
	n.sock = filepath.Join(n.dir, "csi.sock")
	lis, err := Listen("unix://" + n.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := d.Server()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", n.sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n.client, n.ctrl = csi.NewNodeClient(conn), csi.NewControllerClient(conn)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver and daemon log:\n%s", n.log.String())
		}
	})
	return n
}

func mountCapability(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
	}
}

func secretsOf(srv *testenv.Server) map[string]string {
	return map[string]string{"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey}
}
