package staging_test

import (
	"testing"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/internal/cufiletest"
)

// The stagers under test copy into host stand-in files: their bytes can be
// read back, and a file truncated under its mapping makes a copy fail.

// standin returns a host stand-in over a fresh directory.
func standin(t *testing.T) (cufile.Backend, string) {
	t.Helper()
	dir := cufiletest.ShortTempDir(t)
	b, err := hoststandin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b, dir
}
