// Package cli holds what the command (cmd/s3gdsfs) and the demo
// (cmd/s3gdsfs-demo) do alike: usage errors and exit codes, the logger of
// --log-level, size flags, and raising fs.pipe-max-size before a mount.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// Exit codes: 2 for bad usage, 1 for everything that failed at run time.
const (
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError is a mistake in the command line.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef is a UsageError of the formatted message.
func Usagef(format string, a ...any) error { return UsageError{Err: fmt.Errorf(format, a...)} }

// ExitCode reports err on stderr, after the program's name, and returns
// the exit status for it: 0 for none or for -h.
func ExitCode(prog string, err error) int {
	var ue UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		return ExitUsage
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
	return ExitFailure
}

// NewLogger logs at level (--log-level) to file (--log-file), or to
// stderr where file is "".
func NewLogger(level, file string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("--log-level %q: use debug, info, warn or error", level)
	}
	var w io.Writer = os.Stderr
	if file != "" {
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--log-file: %w", err)
		}
		w = f
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv})), nil
}

// pipeRaisedEnv carries fs.pipe-max-size as it was into the process that
// raised it and started again.
const pipeRaisedEnv = "S3GDSFS_PIPE_MAX_SIZE_WAS"

// RaisePipeLimitAndRestart raises fs.pipe-max-size where it is too small
// for splicing replies to FUSE reads of up to maxRead bytes and this process may (root), and then runs the program
// again in this process, since go-fuse read the old limit when the program
// started, unless a child will be started anyway. The process that starts
// again logs what the limit was.
func RaisePipeLimitAndRestart(log *slog.Logger, childFollows bool, maxRead int) error {
	if was := os.Getenv(pipeRaisedEnv); was != "" {
		log.Info("raised fs.pipe-max-size so that pipes hold a spliced reply (--splice=never leaves it)", "was", was, "now", vfs.WantPipeMaxSize(maxRead))
		return nil
	}
	if os.Geteuid() != 0 {
		return nil
	}
	was, err := vfs.RaisePipeLimit(maxRead)
	if err != nil || was == "" {
		return nil // the mount says why it does not splice
	}
	os.Setenv(pipeRaisedEnv, was)
	if childFollows {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("starting again after raising fs.pipe-max-size: %w", err)
	}
	return syscall.Exec(exe, os.Args, os.Environ())
}
