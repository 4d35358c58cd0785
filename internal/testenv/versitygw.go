package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// VersityGWModule is the versitygw release the Makefile installs.
const VersityGWModule = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// ErrNoVersityGW explains how to get the server binary when it is missing.
var ErrNoVersityGW = errors.New("versitygw binary not found (looked at $VERSITYGW, $PATH, $GOBIN and $GOPATH/bin); " +
	"run `make deps` (or `make test`, which runs it), or `go install " + VersityGWModule + "`")

// FindVersityGW returns the versitygw binary to run: $VERSITYGW if set,
// else the one on PATH, else the one `go install` left in GOBIN or GOPATH/bin.
func FindVersityGW() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		return "", errors.New("$VERSITYGW=" + p + " is not an executable file; " + ErrNoVersityGW.Error())
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	for _, dir := range goBinDirs() {
		p := filepath.Join(dir, "versitygw")
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", ErrNoVersityGW
}

// goBinDirs lists where `go install` may have put binaries.
func goBinDirs() []string {
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
			dirs = append(dirs, strings.TrimSpace(lines[0]))
		}
		if len(lines) > 1 {
			for _, gopath := range filepath.SplitList(strings.TrimSpace(lines[1])) {
				dirs = append(dirs, filepath.Join(gopath, "bin"))
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	return dirs
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
