package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a byte count flag written as 1048576, 512KiB, 64MiB, 2GiB (or
// KB, MB, GB for powers of ten).
type Size int64

func (s *Size) String() string { return FormatSize(int64(*s)) }

func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// ParseSize reads a size as Size's flag takes it.
func ParseSize(v string) (int64, error) {
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

// FormatSize writes n in the largest binary unit that divides it.
func FormatSize(n int64) string {
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
