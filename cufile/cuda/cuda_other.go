//go:build !linux

package cuda

import (
	"fmt"
	"runtime"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

func openDriver(library string) (*driver, error) {
	return nil, fmt.Errorf("%w: %s is not loaded on %s", ErrNoDriver, library, runtime.GOOS)
}
