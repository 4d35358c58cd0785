// Command s3gdsfs mounts S3 buckets as a read-only filesystem with fast
// sequential reads and GPU-direct reads (docs/ for the whole story).
//
//	s3gdsfs mount --endpoint URL [--bucket NAME[/PREFIX]] [flags] MOUNTPOINT
//	s3gdsfs stats [--json] [--watch SECONDS] PATH
//	s3gdsfs version
//
// As a mount helper (fstab type fuse.s3gdsfs) it is called as
// "s3gdsfs SOURCE MOUNTPOINT -o options" by mount.fuse3, or as
// "mount.fuse.s3gdsfs SOURCE MOUNTPOINT [-sfnv] -o options" by mount(8)
// itself (the name make install links to it), and goes to the background
// once the mount is ready.
//
// The demo is a program of its own, cmd/s3gdsfs-demo, so that this one
// links no S3 server.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/internal/cli"
)

const (
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
)

func main() {
	if helperName(os.Args[0]) {
		os.Exit(exitCode(runMount(os.Args[1:], true)))
	}
	os.Exit(run(os.Args[1:]))
}

// helperName says whether the program was called by a mount helper's name:
// mount(8) runs /sbin/mount.fuse.s3gdsfs (make install links it to the
// binary) for type fuse.s3gdsfs, with the helper form's arguments only.
func helperName(argv0 string) bool {
	base := filepath.Base(argv0)
	return strings.HasPrefix(base, "mount.fuse.s3gdsfs") || strings.HasPrefix(base, "mount.s3gdsfs")
}

func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "mount":
		err = runMount(args[1:], false)
	case "demo":
		err = cli.Usagef("the demo is a program of its own: run `make demo`, or bin/s3gdsfs-demo after `make build`")
	case "stats":
		err = runStats(args[1:])
	case "version", "--version", "-version":
		fmt.Println("s3gdsfs", versionString())
		return 0
	case "help", "-h", "--help":
		usage(os.Stdout) // asked for: on stdout, for a pager
		return 0
	default:
		// The mount helper form: s3gdsfs SOURCE MOUNTPOINT -o opts. SOURCE
		// is empty where fstab's type is fuse and its source s3gdsfs#.
		if len(args) >= 2 && (args[0] == "" || args[0][0] != '-') {
			err = runMount(args, true)
			break
		}
		fmt.Fprintf(os.Stderr, "s3gdsfs: unknown command %q\n", args[0])
		usage(os.Stderr)
		return exitUsage
	}
	return exitCode(err)
}

// exitCode reports err on stderr and returns the exit status for it.
func exitCode(err error) int { return cli.ExitCode("s3gdsfs", err) }

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  s3gdsfs mount --endpoint URL [--bucket NAME[/PREFIX]] [flags] MOUNTPOINT
  s3gdsfs stats [--json] [--watch SECONDS] PATH
                            (what a mount, or a file on it, has read, failed and holds)
  s3gdsfs version
  s3gdsfs SOURCE MOUNTPOINT -o key=value,...   (mount helper form, for fstab;
                                               mount(8) runs it as /sbin/mount.fuse.s3gdsfs)

's3gdsfs mount --help' lists the flags; README.md and docs/operations.md explain them.
The demo is a program of its own: make demo (bin/s3gdsfs-demo).
`)
}

// version is the release, VERSION at the top of the tree, which the
// Makefile stamps in (-ldflags -X main.version=...); the Python package
// carries the same number, whose first part is the ABI's.
var version string

func versionString() string {
	v := version
	if v == "" {
		v = "devel" // built without the Makefile
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("%s (ioctl ABI %d)", v, abi.Version)
}
