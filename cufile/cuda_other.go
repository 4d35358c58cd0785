//go:build !linux

package cufile

import (
	"fmt"
	"runtime"
)

func openDriver(library string) (*driver, error) {
	return nil, fmt.Errorf("%w: %s is not loaded on %s", ErrNoDriver, library, runtime.GOOS)
}
