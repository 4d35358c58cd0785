package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/s3gdsfs/s3gdsfs/vfs"
)

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
