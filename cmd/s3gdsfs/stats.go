package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/internal/cli"
)

// runStats prints what a mount says about itself: its capabilities and
// counters (the mount root), or a file's version and counters.
func runStats(args []string) error {
	fset := flag.NewFlagSet("stats", flag.ContinueOnError)
	if err := fset.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return cli.UsageError{Err: err}
	}
	if fset.NArg() != 1 {
		return cli.Usagef("usage: s3gdsfs stats PATH (a mount point or a file under it)")
	}
	path := fset.Arg(0)
	out := map[string]json.RawMessage{}
	for _, name := range []string{abi.XattrCaps, abi.XattrStats} {
		v, err := getxattr(path, name)
		if err != nil {
			return fmt.Errorf("%s: %s: %w (is it on an s3gdsfs mount?)", path, name, err)
		}
		out[name] = v
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(b, '\n'))
	return err
}

func getxattr(path, name string) ([]byte, error) {
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Getxattr(path, name, buf)
		if err == syscall.ERANGE {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return bytes.TrimSpace(buf[:n]), nil
	}
}
