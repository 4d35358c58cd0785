// Package mountinfo reads the kernel's table of the mounts this process
// sees (/proc/self/mountinfo), for the daemon's check of its mountpoint,
// the CSI driver's, the benchmark's clean-up and the tests.
package mountinfo

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of the table, its paths unescaped.
type Mount struct {
	Point        string   // where it is mounted
	Options      []string // the mount's own options (ro, nosuid, ...)
	FSType       string   // fuse.s3gdsfs, tmpfs, ...
	Source       string   // what is mounted (s3gdsfs:bucket)
	SuperOptions []string // the filesystem's options (user_id=0, ...)
}

// Read lists the mounts this process sees, oldest first.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// At lists the mounts whose mount point is dir (a clean absolute path),
// oldest first: mounts stacked on one another all stand there.
func At(dir string) ([]Mount, error) {
	all, err := Read()
	if err != nil {
		return nil, err
	}
	var at []Mount
	for _, m := range all {
		if m.Point == dir {
			at = append(at, m)
		}
	}
	return at, nil
}

// Parse reads a table in mountinfo's format: per line, "id parent
// major:minor root point options [optional fields...] - fstype source
// superoptions". Lines not in it are passed over.
func Parse(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 2 {
			continue
		}
		m := Mount{Point: Unescape(f[4]), Options: strings.Split(f[5], ","), FSType: g[0], Source: Unescape(g[1])}
		if len(g) > 2 {
			m.SuperOptions = strings.Split(g[2], ",")
		}
		mounts = append(mounts, m)
	}
	return mounts, sc.Err()
}

// Unescape undoes the kernel's octal escapes in a path or source (\040 for
// a space, \134 for a backslash).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
