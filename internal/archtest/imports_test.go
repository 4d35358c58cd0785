package archtest

import (
	"bufio"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rule is what one package may import beyond the standard library: each
// allowed import with the reason it is needed, for the package's own files
// and, in tests, beside them.
type rule struct {
	dir       string // relative to the module root
	allowed   map[string]string
	testsOnly map[string]string
}

// rules: paths starting with "/" are the module's own packages.
var rules = []rule{
	{
		dir: "cmd/s3gdsfs",
		allowed: map[string]string{
			"/daemon":           "starts and stops a mount; its Config and defaults are the flags' terms",
			"/vfs":              "the core's settings (Core), their defaults and the direct-I/O policy the options name",
			"/internal/setting": "a setting the configuration refused, named by its flag",
			"/internal/cli":     "usage errors, exit codes, the logger, size flags and the pipe limit, as the demo has them",
			"/abi":              "the extended attributes `stats` prints",
		},
		testsOnly: map[string]string{
			"/metrics":            "a core made from the command's configuration needs a counter set",
			"/internal/testenv":   "a real S3 server and the FUSE checks",
			"/client/go/s3gds":    "GPU reads through a mount the command started",
			"/internal/mountinfo": "what the kernel's table says is mounted where",
		},
	},
	{
		// The demo is a program of its own: its S3 server and uploads are
		// linked into it, never into the command.
		dir: "cmd/s3gdsfs-demo",
		allowed: map[string]string{
			"/daemon":                           "starts and stops the demo's mount",
			"/rdmaread/loopback":                "the loopback fabric the demo holds, to have it decline one read",
			"/internal/setting":                 "a metrics address refused because its port is taken",
			"/internal/cli":                     "usage errors, exit codes, the logger, size flags and the pipe limit, as the command has them",
			"/abi":                              "the ioctl request of the demo's GPU reads",
			"/client/go/s3gds":                  "the demo's GPU reads, made as a user's program makes them",
			"github.com/johannesboyne/gofakes3": "the demo's in-process S3 server",
			"github.com/johannesboyne/gofakes3/backend/s3afero": "the demo's in-process S3 server",
			"github.com/minio/minio-go/v7":                      "the demo uploads its objects as any S3 client would",
		},
		testsOnly: map[string]string{
			"/internal/testenv": "the FUSE checks",
		},
	},
	{
		dir: "fs",
		allowed: map[string]string{
			"/vfs":                                "every request is a call on the core",
			"/rdmaread":                           "the read ioctl: the GPU engine",
			"/rdmaread/callers":                   "the read ioctl: the processes reading through the mount's files",
			"/abi":                                "the ioctl's contract and the extended attributes' names",
			"/metrics":                            "counters of FUSE requests and replies",
			"/internal/errno":                     "an error's errno, read back in the one mapping (fs/errno.go)",
			"github.com/hanwen/go-fuse/v2/fs":     "the FUSE library",
			"github.com/hanwen/go-fuse/v2/fuse":   "the FUSE library",
			"github.com/hanwen/go-fuse/v2/splice": "the pipes a spliced reply travels in",
			"golang.org/x/sys/unix":               "system calls the standard library lacks",
		},
	},
}

// TestRoomsImportOnlyWhatTheyMay fails when the command, the demo or the
// FUSE adapter imports a package outside its allowed set: a new import
// either goes through daemon or vfs, or is added here with its reason.
func TestRoomsImportOnlyWhatTheyMay(t *testing.T) {
	root, module := moduleRoot(t)
	for _, r := range rules {
		pkg, err := build.ImportDir(filepath.Join(root, r.dir), build.ImportComment)
		if err != nil {
			t.Fatalf("%s: %v", r.dir, err)
		}
		if len(pkg.GoFiles) == 0 {
			t.Fatalf("%s: no Go files: the rule names a package that moved", r.dir)
		}
		check := func(imports []string, allowed ...map[string]string) {
			for _, imp := range imports {
				if isStandard(imp) {
					continue
				}
				key := imp
				if rest, ok := strings.CutPrefix(imp, module); ok {
					key = rest
				}
				if !slices.ContainsFunc(allowed, func(m map[string]string) bool { _, ok := m[key]; return ok }) {
					t.Errorf("%s imports %s, outside its allowed set (docs/architecture.md, \"Rooms\"): "+
						"go through a package it may import, or allow it in internal/archtest with the reason", r.dir, imp)
				}
			}
		}
		check(pkg.Imports, r.allowed)
		check(append(pkg.TestImports, pkg.XTestImports...), r.allowed, r.testsOnly)
	}
}

// isStandard: the standard library's import paths have no dot in their
// first element.
func isStandard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// moduleRoot finds go.mod above the test's directory and the module path
// it declares.
func moduleRoot(t *testing.T) (dir, module string) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.TrimSpace(m)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
