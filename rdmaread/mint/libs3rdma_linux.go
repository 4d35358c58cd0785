//go:build linux

package mint

import (
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
)

// loadS3RDMA dlopens the first library of names that loads and binds the
// client API; nothing is called yet.
func loadS3RDMA(names []string) (*s3rdmaAPI, string, error) {
	var errs []string
	for _, name := range names {
		lib, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		api := &s3rdmaAPI{}
		for _, s := range api.symbols() {
			sym, err := purego.Dlsym(lib, s.name)
			if err != nil {
				if s.optional {
					continue
				}
				_ = purego.Dlclose(lib)
				return nil, "", fmt.Errorf("%s lacks %s: %v", name, s.name, err)
			}
			purego.RegisterFunc(s.fn, sym)
		}
		return api, name, nil
	}
	return nil, "", fmt.Errorf("cannot load %s: %s", strings.Join(names, " or "), strings.Join(errs, "; "))
}
