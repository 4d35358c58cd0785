package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/cli"
)

// credentialsFromFile reads the keys of one profile of an AWS
// shared-credentials file (--credentials-file), for mounts that have no
// login environment (fstab, systemd):
//
//	[default]
//	aws_access_key_id = AKIA...
//	aws_secret_access_key = ...
//	aws_session_token = ...      (optional)
//
// The file must be a regular file of at most maxCredentialsFile bytes owned
// by the caller (or root) that neither group nor others may read or write,
// as ssh asks of its keys: a key readable by others is refused rather than
// used. Only static keys are read (no credential_process, no SSO), once,
// when the mount starts. Errors name the option and the file; they never
// quote a key.
func credentialsFromFile(path, profile string) (*daemon.Credentials, error) {
	bad := func(format string, a ...any) error {
		return cli.Usagef("--credentials-file %s: %s", path, fmt.Sprintf(format, a...))
	}
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer, for ever, with the mount saying nothing. The type is checked
	// on the opened file, so a rename in between cannot swap it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			// What open(2) says of a socket.
			if fi, serr := os.Stat(path); serr == nil && fi.Mode().Type() == fs.ModeSocket {
				return nil, bad("not a regular file but a socket")
			}
		}
		return nil, bad("%v", unwrapPathError(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, bad("%v", unwrapPathError(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, bad("not a regular file but %s", fileKind(fi.Mode()))
	}
	if fi.Size() > maxCredentialsFile {
		return nil, bad("%d bytes: a credentials file is at most %d", fi.Size(), maxCredentialsFile)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, bad("mode %04o lets group or others at the keys; chmod 600 %s", perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if euid := uint32(os.Geteuid()); st.Uid != euid && st.Uid != 0 {
			return nil, bad("owned by uid %d, not by the mounting user (uid %d) or root; chown it", st.Uid, euid)
		}
	}
	// Bounded again as read: the file may grow after the fstat.
	keys, found, err := readProfile(io.LimitReader(f, maxCredentialsFile+1), profile)
	if err != nil {
		return nil, bad("%v", err)
	}
	if !found {
		return nil, bad("no [%s] profile (--profile names another)", profile)
	}
	id, secret := keys["aws_access_key_id"], keys["aws_secret_access_key"]
	if id == "" || secret == "" {
		return nil, bad("profile [%s] needs both aws_access_key_id and aws_secret_access_key", profile)
	}
	return daemon.KeyCredentials(id, secret, keys["aws_session_token"]), nil
}

// maxCredentialsFile bounds --credentials-file: a file of a few profiles
// is a few hundred bytes; anything near this is not a key file.
const maxCredentialsFile = 1 << 20

// fileKind names what a path that is not a regular file is.
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case fs.ModeDir:
		return "a directory"
	case fs.ModeNamedPipe:
		return "a FIFO (named pipe)"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "a character device"
	case fs.ModeDevice:
		return "a block device"
	}
	return fmt.Sprintf("of type %v", m.Type())
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// readProfile returns the keys of one [profile] section of an INI file:
// "key = value" lines, '#' and ';' comments; "[profile NAME]" is also
// read as NAME, as the AWS config file writes it.
func readProfile(r io.Reader, profile string) (map[string]string, bool, error) {
	keys := map[string]string{}
	found, in := false, false
	read := &countingReader{r: r}
	sc := bufio.NewScanner(read)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") {
				return nil, false, fmt.Errorf("line %d: a section header without its ']'", n)
			}
			name := strings.TrimSpace(line[1 : len(line)-1])
			name = strings.TrimSpace(strings.TrimPrefix(name, "profile "))
			in = name == profile
			found = found || in
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, false, fmt.Errorf("line %d: neither [section] nor key = value", n)
		}
		if in {
			keys[strings.ToLower(strings.TrimSpace(key))] = strings.TrimSpace(value)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, false, err
	}
	if read.n > maxCredentialsFile {
		return nil, false, fmt.Errorf("more than %d bytes: a credentials file is at most %d", maxCredentialsFile, maxCredentialsFile)
	}
	return keys, found, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
