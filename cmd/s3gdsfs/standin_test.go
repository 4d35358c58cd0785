package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/cli"
)

// The host stand-in with --allow-other lets any user of the host have the
// daemon write files of theirs: the mount refuses the pair, naming the
// flag that accepts it, unless that one is given too, in
// either form.
func TestHostStandinWithAllowOtherNeedsItsOwnFlag(t *testing.T) {
	refused := [][]string{
		{"--gpu=host-standin", "--allow-other"},
		{"--gpu", "host-standin", "--allow-other", "true"},
		{"-o", "gpu=host-standin,allow_other"},
		{"--allow-other", "-o", "gpu=host-standin"},
		{"--gpu=host-standin", "--allow-other", "--host-standin-allow-other=false"},
	}
	for _, args := range refused {
		err := configOf(args)
		var ue cli.UsageError
		if err == nil || !errors.As(err, &ue) {
			t.Errorf("%q: %v; want a usage error", args, err)
			continue
		}
		for _, flag := range []string{"--host-standin-allow-other", "host stand-in", "every user"} {
			if !strings.Contains(err.Error(), flag) {
				t.Errorf("%q: %q does not name %s", args, err, flag)
			}
		}
	}
	accepted := [][]string{
		{"--gpu=host-standin", "--allow-other", "--host-standin-allow-other"},
		{"-o", "gpu=host-standin,allow_other,host_standin_allow_other"},
		{"-o", "gpu=host-standin,allow-other,host-standin-allow-other=true"},
		{"--gpu=host-standin"},
		{"--allow-other"},
		{"--gpu=off", "--allow-other"},
	}
	for _, args := range accepted {
		if err := configOf(args); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// configOf parses a mount command line with args and checks the
// configuration it makes, as the mount does before it starts.
func configOf(args []string) error {
	mf, positional, err := parseMountArgs(append(append([]string{"--endpoint", "http://127.0.0.1:1"}, args...), "/mnt"), false)
	if err != nil {
		return err
	}
	_, err = mf.config(positional[0], nil)
	return err
}
