// Package gotest runs client/python's pytest suite against a real s3gdsfs
// mount: versitygw, a daemon with the host stand-in in place of CUDA, and
// objects the tests check byte for byte.
package gotest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

const bucket = "data"

// datasetObjects are the keys and sizes the dataset tests list and read:
// train/ has shards, one nested file, an empty one; "ds/trainx.bin" shares
// the prefix "ds/train" but not the directory.
func datasetObjects() map[string]int64 {
	objs := map[string]int64{
		"ds/train/sub/nested.bin": 77_777,
		"ds/train/empty.bin":      0,
		"ds/trainx.bin":           4096,
		"ds/val/v-000.bin":        3 << 20,
	}
	for i := range 13 {
		objs[fmt.Sprintf("ds/train/shard-%03d.bin", i)] = int64(1000 + i*37_501) // up to ~450 KB, odd sizes
	}
	objs["ds/train/shard-013.bin"] = 2<<20 + 13 // over the daemon's slot, not a multiple of it
	return objs
}

// TestPythonClientOnMount runs `pytest tests` in client/python with
// S3GDS_MOUNT naming the mount. It needs S3GDS_TEST_PYTHON, the interpreter
// with pytest, numpy, safetensors and torch, which `make test-python`
// installs and sets.
func TestPythonClientOnMount(t *testing.T) {
	python := os.Getenv("S3GDS_TEST_PYTHON")
	if python == "" {
		t.Skip("S3GDS_TEST_PYTHON is not set: `make test-python` installs the Python test dependencies and runs this test with them")
	}
	testenv.RequireFUSE(t)
	pyDir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	local := filepath.Join(work, "local")
	run(t, pyDir, nil, python, filepath.Join("tests", "make_fixtures.py"), local)

	srv := testenv.Start(t)
	srv.CreateBucket(t, bucket)
	err = filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		srv.PutObject(t, bucket, filepath.ToSlash(rel), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest := map[string]map[string]any{}
	seed := int64(1)
	for key, size := range datasetObjects() {
		seed++
		sum := srv.PutRandomObject(t, bucket, key, size, seed)
		manifest[key] = map[string]any{"size": size, "sha256": sum}
	}
	manifestPath := filepath.Join(work, "manifest.json")
	b, _ := json.Marshal(manifest)
	if err := os.WriteFile(manifestPath, b, 0o644); err != nil {
		t.Fatal(err)
	}

	mp := mount(t, srv)
	srv.CreateBucket(t, writeBucket)
	writeMP := t.TempDir()
	wcfg := mounttest.Config(t, srv, writeBucket, writeMP)
	wcfg.Core.Writes.Allow = true
	wcfg.Core.Writes.PartSize = 5 << 20 // checkpoints of a few parts
	// Spliced whole-object GETs, as a mount's default: checkpoints are read
	// back through mappings as loaders read them.
	wcfg.Splice = "auto"
	// The GPU write ioctl with host buffers standing in for device memory,
	// through staging of a few small slots as the read mount's.
	wcfg.GPU.Mode = "host-standin"
	wcfg.GPU.StandinDir = "/dev/shm"
	wcfg.GPU.Staging.SlotSize = 1 << 20
	wcfg.GPU.Staging.Slots = 8
	mounttest.Start(t, wcfg)
	writtenPath := filepath.Join(work, "written.json")
	env := []string{
		"S3GDS_MOUNT=" + mp,
		"S3GDS_TEST_LOCAL=" + local,
		"S3GDS_TEST_MANIFEST=" + manifestPath,
		"S3GDS_WRITE_MOUNT=" + writeMP,
		"S3GDS_TEST_WRITTEN=" + writtenPath,
		"PYTHONDONTWRITEBYTECODE=1",
	}
	// tests/test_mounted.py is for client/go/s3gds's fake daemon (TestPythonClientThroughFUSE).
	out := run(t, pyDir, env, python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
		"--ignore=tests/test_mounted.py", "tests")
	t.Logf("%s", out)
	// Only the CUDA tests may skip here: a mount is present.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "SKIPPED") && !regexp.MustCompile(`(?i)cuda`).MatchString(line) {
			t.Errorf("skipped with a mount present: %s", line)
		}
	}
	if !regexp.MustCompile(`\d+ passed`).MatchString(out) {
		t.Errorf("pytest passed no test")
	}
	checkWritten(t, srv, writtenPath)
}

// writeBucket is where the write tests (tests/test_write.py) save checkpoints.
const writeBucket = "ckpt"

// checkWritten compares what the write tests read back through the mount
// with the objects straight from S3, and finds no multipart upload open.
func checkWritten(t *testing.T, srv *testenv.Server, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the write tests left no record: %v", err)
	}
	var written map[string]string
	if err := json.Unmarshal(b, &written); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"torch/model.pt", "st/model.safetensors", "dcp/step-1/.metadata",
		"s3gds/model.safetensors", "dcp/single/.metadata", "dcp/ranks/s3gds/.metadata",
		"dcp/ranks/s3gds/__1_0.distcp", "hf/gpt2/model.safetensors", "hf/gpt2-sharded/model.safetensors.index.json",
	} {
		if _, ok := written[key]; !ok {
			t.Errorf("the write tests did not write %s", key)
		}
	}
	ctx := context.Background()
	for key, want := range written {
		o, err := srv.Client.GetObject(ctx, writeBucket, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, o)
		o.Close()
		if got := hex.EncodeToString(h.Sum(nil)); err != nil || got != want {
			t.Errorf("%s: S3 holds sha256 %s (%v), the mount read %s", key, got, err, want)
		}
	}
	for u := range srv.Client.ListIncompleteUploads(ctx, writeBucket, "", true) {
		t.Errorf("multipart upload left open: %s %s %v", u.Key, u.UploadID, u.Err)
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v after %v\n%s", name, strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), out)
	}
	return string(out)
}

// mount mounts the bucket with the host stand-in: HostBuffers, files under
// /dev/shm, are the device memory (docs/ioctl.md).
func mount(t *testing.T, srv *testenv.Server) string {
	t.Helper()
	mp := t.TempDir()
	mounttest.Standin(t, srv, bucket, mp, "/dev/shm")
	return mp
}
