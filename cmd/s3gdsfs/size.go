package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// sizeFlag is a byte count written as 1048576, 512KiB, 64MiB, 2GiB (or KB, MB,
// GB for powers of ten).
type sizeFlag int64

func (s *sizeFlag) String() string { return formatSize(int64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
		{"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("not a size (use bytes or a unit: 512KiB, 64MiB, 2GiB)")
	}
	return n * mult, nil
}

func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// modeFlag is an octal permission mode such as 0444.
type modeFlag uint32

func (m *modeFlag) String() string { return fmt.Sprintf("%#o", uint32(*m)) }

func (m *modeFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 8, 32)
	if err != nil || n > 0o7777 {
		return fmt.Errorf("not an octal mode such as 0444")
	}
	*m = modeFlag(n)
	return nil
}

// parsePolicy reads an auto/always/never flag; the boolean spellings
// stand for always and never, so the flag may be written alone.
func parsePolicy(v string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "auto":
		return "auto", nil
	case "always", "true", "on", "1":
		return "always", nil
	case "never", "false", "off", "0":
		return "never", nil
	}
	return "", fmt.Errorf("use auto, always or never")
}

// directIOFlag is --direct-io: auto, always or never. Written alone (its
// option's bare value) it means always, as it did when it was a plain switch;
// accepts says which next argument the bare flag takes as its value.
type directIOFlag vfs.DirectIO

func (d *directIOFlag) accepts(v string) bool { _, err := parsePolicy(v); return err == nil }

func (d *directIOFlag) String() string { return vfs.DirectIO(*d).String() }

func (d *directIOFlag) Set(v string) error {
	p, err := parsePolicy(v)
	if err != nil {
		return err
	}
	*d = directIOFlag(map[string]vfs.DirectIO{"auto": vfs.DirectIOAuto, "always": vfs.DirectIOAlways, "never": vfs.DirectIONever}[p])
	return nil
}

// policyFlag is --stream or --splice: auto, always or never. Written alone
// (its option's bare value) it means always.
type policyFlag string

func (f *policyFlag) accepts(v string) bool { _, err := parsePolicy(v); return err == nil }

func (f *policyFlag) String() string { return string(*f) }

func (f *policyFlag) Set(v string) error {
	p, err := parsePolicy(v)
	if err != nil {
		return err
	}
	*f = policyFlag(p)
	return nil
}
