//go:build linux

package cuda

import (
	"fmt"
	"runtime"

	"github.com/ebitengine/purego"

	"github.com/s3gdsfs/s3gdsfs/cufile"
)

// openDriver dlopens the driver and binds every function this package uses;
// nothing is called yet.
func openDriver(library string) (*driver, error) {
	// dlerror's message belongs to the thread that failed: without the
	// lock the goroutine can move between dlopen and dlerror and read an
	// empty one (seen under -race).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lib, err := purego.Dlopen(library, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: dlopen %s: %v", cufile.ErrNoDriver, library, err)
	}
	d := &driver{}
	for _, s := range d.symbols() {
		sym, err := purego.Dlsym(lib, s.name)
		if err != nil {
			_ = purego.Dlclose(lib)
			return nil, fmt.Errorf("%w: %s lacks %s: %v", cufile.ErrNoDriver, library, s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	return d, nil
}
