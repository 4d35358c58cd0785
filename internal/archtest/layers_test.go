package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// layers is every package of the module, lowest first; docs/architecture.md's
// room table lists them in the same order. A package imports only packages
// of lower layers (tests aside), so a room never reaches up into one that
// uses it. A new package gets its row here, with the layer its imports allow.
var layers = [][]string{
	// Leaves: contracts and helpers that import nothing of the module.
	{"abi", "rdmatoken", "internal/errno", "internal/setting", "internal/mountinfo", "internal/faultproxy", "internal/testenv", "internal/archtest",
		"cufile-preload", "client/python/gotest", "integration"},
	// Clients of the ABI, the counters, the memory rooms' contract, the
	// GPU reads' scheduler, and the CSI driver (which runs the command as a
	// program, importing none of it).
	{"client/go/s3gds", "metrics", "cache", "cufile", "rdmaread/sched", "csi"},
	// The S3 layer, the staging ring every memory backend copies through,
	// and RDMA token minting.
	{"objstore", "cufile/staging", "rdmaread/mint", "internal/cufiletest"},
	// The memory backends: the CUDA binding and the host stand-in.
	{"cufile/cuda", "cufile/hoststandin"},
	// The cores: the namespace and POSIX reads, the GPU engine, the test
	// decorator of the store, and the S3 load benchmark on the CUDA binding.
	{"vfs", "rdmaread", "internal/faultstore", "bench/s3load"},
	// Around the GPU engine: the callers of its reads, and the loopback RDMA
	// fabric, which plays a server to it.
	{"rdmaread/callers", "rdmaread/loopback"},
	// The FUSE adapter over the cores.
	{"fs"},
	// The wiring of one mount.
	{"daemon"},
	// What the command and the demo do alike over it.
	{"internal/cli"},
	// What runs a mount: the command, the demo, the test mount, the
	// benchmarks (the FUSE ceiling takes the daemon's defaults, so that it
	// serves as a mount does).
	{"cmd/s3gdsfs", "cmd/s3gdsfs-demo", "cmd/s3gdsfs-csi", "internal/mounttest", "bench", "bench/fuseread"},
}

// TestEveryPackageImportsOnlyLowerLayers fails when a package of the
// module is missing from layers or imports a package of its own layer or
// one above it.
func TestEveryPackageImportsOnlyLowerLayers(t *testing.T) {
	root, module := moduleRoot(t)
	layerOf := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			if _, dup := layerOf[p]; dup {
				t.Fatalf("%s is in two layers", p)
			}
			layerOf[p] = i
		}
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue // go-fuse under third_party is a module of its own
		}
		seen[rel] = true
		mine, ok := layerOf[rel]
		if !ok {
			t.Errorf("%s is in no layer: add it to internal/archtest's layers and docs/architecture.md's room table", rel)
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if l, known := layerOf[dep]; known && l >= mine {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package imports only lower layers", rel, mine, dep, l)
			}
		}
	}
	for p := range layerOf {
		if !seen[p] {
			t.Errorf("layers names %s, which is not a package of the module any more", p)
		}
	}
}
