package cli

import (
	"errors"
	"flag"
	"fmt"
	"testing"
)

// Sizes are read with binary and decimal units and written back in the
// largest binary unit that divides them; what is not a size is refused.
func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{
		"1048576": 1 << 20, "512KiB": 512 << 10, "64MiB": 64 << 20, "2GiB": 2 << 30, "1TiB": 1 << 40,
		"3MB": 3e6, "4G": 4 << 30, "7B": 7, " 8 MiB ": 8 << 20,
	} {
		n, err := ParseSize(in)
		if err != nil || n != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1", "1.5GiB", "9999999TiB"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1 << 10: "1KiB", 3 << 20: "3MiB", 1<<30 + 1: "1073741825", 5 << 40: "5TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
	var s Size
	if err := s.Set("24MiB"); err != nil || s.String() != "24MiB" {
		t.Errorf("Size.Set(24MiB): %v, %q", err, s.String())
	}
}

// A usage error is exit 2 however it is wrapped, -h is 0, anything else 1.
func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{flag.ErrHelp, 0},
		{Usagef("--x %d: bad", 1), ExitUsage},
		{fmt.Errorf("parsing: %w", UsageError{Err: errors.New("bad")}), ExitUsage},
		{errors.New("mount failed"), ExitFailure},
	} {
		if got := ExitCode("test", c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
