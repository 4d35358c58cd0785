package testenv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BuildProgram builds the main package in the current directory as name in
// a directory of its own, for a package's TestMain; remove the directory
// (filepath.Dir of the path) once the tests have run.
func BuildProgram(name string) (string, error) {
	dir, err := os.MkdirTemp("", name+"-bin-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", errors.New(string(out) + err.Error())
	}
	return path, nil
}

// Run is what a program run by RunProgram left.
type Run struct {
	Code           int
	Stdout, Stderr string
}

// RunProgram runs bin with args and env added to the test's environment,
// with a hard bound of 60 s: a hang fails the test.
func RunProgram(t testing.TB, bin string, env []string, args ...string) Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within 60s", filepath.Base(bin), args)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return Run{code, stdout.String(), stderr.String()}
}

// BuildPackage builds the main package pkg (an import path, or a
// directory relative to the current one) as name in a directory of its
// own; remove the directory (filepath.Dir of the path) once the tests
// have run.
func BuildPackage(name, pkg string) (string, error) {
	dir, err := os.MkdirTemp("", name+"-bin-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", errors.New(string(out) + err.Error())
	}
	return path, nil
}
