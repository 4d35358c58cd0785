//go:build !linux

package mint

import (
	"fmt"
	"runtime"
	"strings"
)

func loadS3RDMA(names []string) (*s3rdmaAPI, string, error) {
	return nil, "", fmt.Errorf("%s is not loaded on %s", strings.Join(names, " or "), runtime.GOOS)
}
