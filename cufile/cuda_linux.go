//go:build linux

package cufile

import (
	"fmt"
	"runtime"

	"github.com/ebitengine/purego"
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
		return nil, fmt.Errorf("%w: dlopen %s: %v", ErrNoDriver, library, err)
	}
	d := &driver{}
	for _, s := range d.symbols() {
		sym, err := purego.Dlsym(lib, s.name)
		if err != nil {
			_ = purego.Dlclose(lib)
			return nil, fmt.Errorf("%w: %s lacks %s: %v", ErrNoDriver, library, s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	return d, nil
}
