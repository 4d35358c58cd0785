# Build, test and benchmark entry points for s3gdsfs.
# Everything runs as root on Debian; `make deps` installs what is missing.

SHELL := bash
GO    ?= go

BIN        := bin/s3gdsfs
STATIC_BIN := bin/s3gdsfs-static
# The demo is a program of its own, so that s3gdsfs links no S3 server.
DEMO_BIN        := bin/s3gdsfs-demo
# The Kubernetes CSI driver, which runs bin/s3gdsfs per volume (docs/kubernetes.md).
CSI_BIN         := bin/s3gdsfs-csi
STATIC_CSI_BIN  := bin/s3gdsfs-csi-static
# A module of its own (Helm and k8s.io/api stay out of go.mod): the chart
# rendered by Helm's engine and decoded strictly into the API types.
CHARTTEST_DIR   := deploy/charttest
STATIC_DEMO_BIN := bin/s3gdsfs-demo-static
BENCH_OUT  ?= out/bench

# VERSION is the release of the binary and of the Python package
# (client/python/s3gds/_version.py, which TestOneVersion holds to it); its
# first number is the ioctl ABI's.
VERSION    := $(shell cat VERSION)
GO_LDFLAGS := -X main.version=$(VERSION)

# versitygw is the real S3 server the tests and the benchmark talk to.
VERSITYGW_VERSION := v1.8.0
VERSITYGW_MODULE  := github.com/versity/versitygw/cmd/versitygw
GOBIN_DIR := $(shell d=$$($(GO) env GOBIN); [ -n "$$d" ] || d=$$($(GO) env GOPATH | cut -d: -f1)/bin; echo $$d)
# Tests and the benchmark find the server through this variable.
export VERSITYGW ?= $(GOBIN_DIR)/versitygw

.PHONY: all help print-go-ldflags deps bench-deps versitygw build build-demo build-static gpu-bundle posix-bundle preload test-preload test test-race go-fuse-check go-fuse-test demo bench bench-rdma bench-scaling fmt fmt-check vet clean

all: build

help:
	@echo "first:   demo (try it), build, test (about 3 GB of Python wheels the first time: README.md)"
	@echo "build:   build build-demo build-static preload gpu-bundle posix-bundle"
	@echo "test:    test test-python python-venv test-preload test-race go-fuse-check go-fuse-test fmt-check vet"
	@echo "install: install uninstall (PREFIX, DESTDIR, INSTALL_PYTHON=no: docs/operations.md)"
	@echo "measure: bench bench-rdma bench-scaling"
	@echo "other:   deps bench-deps versitygw fmt clean"
	@echo "knobs:   DEMO_FLAGS='...'  BENCH_FLAGS='-runs 1 -size-scale 0.25 -skip-peers'  PY_VENV=...  PY_WHEELS=..."

# print-go-ldflags: what the builds stamp into the binaries (the tests
# build with it).
print-go-ldflags:
	@echo '$(GO_LDFLAGS)'

# deps: what `make test` needs (versitygw, fusermount3).
deps: versitygw
	scripts/apt-install.sh fuse3

# bench-deps: deps plus the peer filesystems the benchmark compares against
# (one apt-get call, so at most one apt-get update).
bench-deps: versitygw
	scripts/apt-install.sh fuse3 rclone s3fs python3-matplotlib

# go install only when the binary is missing or not the pinned release
# (`versitygw --version` says "git" for go-installed builds, so ask Go).
versitygw:
	@if $(GO) version -m "$(VERSITYGW)" 2>/dev/null | \
		grep -Eq '^\s+mod\s+github.com/versity/versitygw\s+$(VERSITYGW_VERSION)(\s|$$)'; then \
		echo "versitygw $(VERSITYGW_VERSION) present: $(VERSITYGW)"; \
	else \
		echo "installing $(VERSITYGW_MODULE)@$(VERSITYGW_VERSION)"; \
		GOBIN="$(GOBIN_DIR)" $(GO) install $(VERSITYGW_MODULE)@$(VERSITYGW_VERSION); \
	fi

build: build-demo
	$(GO) build -ldflags='$(GO_LDFLAGS)' -o $(BIN) ./cmd/s3gdsfs
	$(GO) build -ldflags='$(GO_LDFLAGS)' -o $(CSI_BIN) ./cmd/s3gdsfs-csi

# build-demo: bin/s3gdsfs-demo, which make demo runs.
build-demo:
	$(GO) build -o $(DEMO_BIN) ./cmd/s3gdsfs-demo

# preload: libs3gdsfs_cufile.so, cuFile reads and writes of s3gdsfs files through
# the GPU read and write ioctls, for LD_PRELOAD (docs/cufile-preload.md). gcc and libc only.
# The same library named libcufile.so.0 (its soname too), for programs that load
# NVIDIA's libcufile by that name themselves, as kvikio does through cuda.pathfinder:
# preloaded, it is the libcufile.so.0 they find already loaded (docs/cufile-preload.md).
PRELOAD_LIB := bin/libs3gdsfs_cufile.so
DROPIN_LIB  := bin/cufile/libcufile.so.0
preload:
	mkdir -p $(dir $(PRELOAD_LIB)) $(dir $(DROPIN_LIB))
	gcc -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror \
	  -Iclient/c -o $(PRELOAD_LIB) cufile-preload/src/s3gdsfs_cufile.c -ldl -lpthread
	gcc -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror -Wl,-soname,libcufile.so.0 \
	  -Iclient/c -o $(DROPIN_LIB) cufile-preload/src/s3gdsfs_cufile.c -ldl -lpthread

# test-preload: the library against fake libcufile and libcuda, through a
# real mount (the tests of cufile-preload build their own copies).
test-preload: deps preload
	$(GO) test -count=1 -v ./cufile-preload

# install: the binary (not the demo), the mount helper mount(8) runs for type
# fuse.s3gdsfs, the Python client, the example systemd units and the docs
# (docs/operations.md, "Installing"). DESTDIR stages the whole tree.
#   PREFIX=/usr/local  BINDIR=$(PREFIX)/bin  DOCDIR=$(PREFIX)/share/doc/s3gdsfs
#   SBINDIR=/sbin: mount(8) looks for mount.<type> only in /sbin (and
#     /sbin/fs.d, /sbin/fs), whatever the prefix.
#   UNITDIR=$(PREFIX)/lib/systemd/system: s3gdsfs@.service, on systemd's path.
#   INSTALL_PYTHON=no skips the Python client; PYTHON and PIP_FLAGS choose
#     the interpreter and pip's flags (on Debian's own python3, outside a
#     virtual environment, pip wants PIP_FLAGS=--break-system-packages).
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
SBINDIR ?= /sbin
DOCDIR  ?= $(PREFIX)/share/doc/s3gdsfs
UNITDIR ?= $(PREFIX)/lib/systemd/system
LIBDIR  ?= $(PREFIX)/lib
INSTALL_PYTHON ?= yes
PYTHON    ?= python3
PIP_FLAGS ?=
PY_PROJECT := client/python/pyproject.toml
# The units name the binary by its installed path.
UNITS := contrib/systemd/s3gdsfs@.service
UNIT_EXAMPLES := contrib/systemd/mnt-data.mount contrib/systemd/s3gdsfs-example.env
# Every doc, flat in DOCDIR, so that their links between them resolve
# there (README.md's docs/X.md become X.md); the two README.md links
# outside docs/ keep their folders.
DOCS := README.md $(wildcard docs/*.md docs/*.png)
DOCS_NESTED := client/README.md third_party/go-fuse/PATCHES.md

.PHONY: install uninstall
install: build preload
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(SBINDIR)" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(DOCDIR)/examples" "$(DESTDIR)$(LIBDIR)"
	install -m 0755 $(BIN) "$(DESTDIR)$(BINDIR)/s3gdsfs"
	install -m 0755 $(PRELOAD_LIB) "$(DESTDIR)$(LIBDIR)/libs3gdsfs_cufile.so"
	install -d "$(DESTDIR)$(LIBDIR)/s3gdsfs"
	install -m 0755 $(DROPIN_LIB) "$(DESTDIR)$(LIBDIR)/s3gdsfs/libcufile.so.0"
	ln -sfn "$(BINDIR)/s3gdsfs" "$(DESTDIR)$(SBINDIR)/mount.fuse.s3gdsfs"
	for u in $(UNITS); do \
		sed 's|/usr/local/bin/s3gdsfs|$(BINDIR)/s3gdsfs|g; s|/usr/local/share/doc/s3gdsfs|$(DOCDIR)|g' $$u > "$(DESTDIR)$(UNITDIR)/$$(basename $$u)" && \
		chmod 0644 "$(DESTDIR)$(UNITDIR)/$$(basename $$u)" || exit 1; \
	done
	for f in $(UNIT_EXAMPLES); do \
		sed 's|/usr/local/bin/s3gdsfs|$(BINDIR)/s3gdsfs|g' $$f > "$(DESTDIR)$(DOCDIR)/examples/$$(basename $$f)" || exit 1; \
	done
	install -m 0644 $(filter-out README.md,$(DOCS)) "$(DESTDIR)$(DOCDIR)/"
	sed 's|](docs/|](|g' README.md > "$(DESTDIR)$(DOCDIR)/README.md" && chmod 0644 "$(DESTDIR)$(DOCDIR)/README.md"
	for f in $(DOCS_NESTED); do \
		install -D -m 0644 $$f "$(DESTDIR)$(DOCDIR)/$$f" || exit 1; \
	done
	@if [ "$(INSTALL_PYTHON)" != yes ]; then \
		echo "install: the Python client skipped (INSTALL_PYTHON=$(INSTALL_PYTHON))"; \
	elif [ ! -f $(PY_PROJECT) ]; then \
		echo "install: the Python client skipped: no $(PY_PROJECT) yet"; \
	else \
		root=; [ -z "$(DESTDIR)" ] || root="--root $(DESTDIR)"; \
		echo "$(PYTHON) -m pip install $(PIP_FLAGS) $$root ./client/python"; \
		$(PYTHON) -m pip install $(PIP_FLAGS) $$root ./client/python; \
	fi
	@echo "installed $(DESTDIR)$(BINDIR)/s3gdsfs and the mount helper $(DESTDIR)$(SBINDIR)/mount.fuse.s3gdsfs"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/s3gdsfs" "$(DESTDIR)$(LIBDIR)/libs3gdsfs_cufile.so" "$(DESTDIR)$(LIBDIR)/s3gdsfs/libcufile.so.0"
	rmdir "$(DESTDIR)$(LIBDIR)/s3gdsfs" 2>/dev/null || true
	if [ -L "$(DESTDIR)$(SBINDIR)/mount.fuse.s3gdsfs" ]; then rm -f "$(DESTDIR)$(SBINDIR)/mount.fuse.s3gdsfs"; fi
	rm -f $(foreach u,$(UNITS),"$(DESTDIR)$(UNITDIR)/$(notdir $(u))")
	rm -f $(foreach f,$(DOCS),"$(DESTDIR)$(DOCDIR)/$(notdir $(f))") $(foreach f,$(UNIT_EXAMPLES),"$(DESTDIR)$(DOCDIR)/examples/$(notdir $(f))")
	rm -f $(foreach f,$(DOCS_NESTED),"$(DESTDIR)$(DOCDIR)/$(f)")
	rmdir "$(DESTDIR)$(DOCDIR)/examples" "$(DESTDIR)$(DOCDIR)/client" "$(DESTDIR)$(DOCDIR)/third_party/go-fuse" \
		"$(DESTDIR)$(DOCDIR)/third_party" "$(DESTDIR)$(DOCDIR)" 2>/dev/null || true
	@if [ "$(INSTALL_PYTHON)" != yes ] || [ ! -f $(PY_PROJECT) ]; then \
		echo "uninstall: the Python client left alone"; \
	elif [ -n "$(DESTDIR)" ]; then \
		echo "uninstall: the Python client left alone under DESTDIR (pip uninstalls only from the live system)"; \
	else \
		name=$$(sed -n 's/^name *= *["'"'"']\([^"'"'"']*\)["'"'"'].*/\1/p' $(PY_PROJECT) | head -1); \
		if [ -z "$$name" ]; then echo "uninstall: no project name in $(PY_PROJECT)"; exit 1; fi; \
		echo "$(PYTHON) -m pip uninstall -y $(PIP_FLAGS) $$name"; \
		$(PYTHON) -m pip uninstall -y $(PIP_FLAGS) $$name; \
	fi

# Static, stripped binaries to copy onto other machines: the command, and
# the demo to try it there.
build-static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(GO_LDFLAGS)' -o $(STATIC_BIN) ./cmd/s3gdsfs
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(STATIC_DEMO_BIN) ./cmd/s3gdsfs-demo
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(GO_LDFLAGS)' -o $(STATIC_CSI_BIN) ./cmd/s3gdsfs-csi

# gpu-bundle: static, stripped, xz-compressed s3gdsfs, s3load, fuseread and versitygw,
# the cuFile library, and the CUDA backend's tests (cufile-cuda.test, which skip without a GPU:
# PART=check scripts/gpu/models_all.sh runs them there), in .dev/gpu, for scripts/gpu/run.sh on
# a GPU machine that has no Go.
GPU_BUNDLE := .dev/gpu
gpu-bundle:
	mkdir -p $(GPU_BUNDLE)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(GO_LDFLAGS)' -o $(GPU_BUNDLE)/s3gdsfs ./cmd/s3gdsfs
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(GPU_BUNDLE)/s3load ./bench/s3load
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(GPU_BUNDLE)/fuseread ./bench/fuseread
	CGO_ENABLED=0 $(GO) test -c -trimpath -ldflags='-s -w' -o $(GPU_BUNDLE)/cufile-cuda.test ./cufile/cuda
	CGO_ENABLED=0 GOBIN=$(abspath $(GPU_BUNDLE)) $(GO) install -trimpath -ldflags='-s -w' $(VERSITYGW_MODULE)@$(VERSITYGW_VERSION)
	$(MAKE) preload && cp $(PRELOAD_LIB) $(DROPIN_LIB) $(GPU_BUNDLE)/
	cd $(GPU_BUNDLE) && for f in s3gdsfs s3load fuseread cufile-cuda.test versitygw libs3gdsfs_cufile.so libcufile.so.0; do xz -6 -T0 -f $$f; done
	@ls -la $(GPU_BUNDLE)

# posix-bundle: the POSIX benchmark for a machine with more cores and no Go
# or registry (scripts/gpu/run_posix.sh): the bench binary, plus the peers
# and fusermount3 from this machine (bench-deps) with the shared libraries
# s3fs needs beyond glibc, all xz-compressed in .dev/posix.
POSIX_BUNDLE := .dev/posix
posix-bundle: gpu-bundle bench-deps
	rm -rf $(POSIX_BUNDLE) && mkdir -p $(POSIX_BUNDLE)/lib
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(POSIX_BUNDLE)/bench ./bench
	cp "$$(command -v rclone)" "$$(command -v s3fs)" "$$(command -v fusermount3)" $(POSIX_BUNDLE)/
	ldd "$$(command -v s3fs)" | awk '$$3 ~ /^\// {print $$3}' \
	  | grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' \
	  | xargs -I{} cp -L {} $(POSIX_BUNDLE)/lib/
	tar -C $(POSIX_BUNDLE) -cf $(POSIX_BUNDLE)/lib.tar lib && rm -rf $(POSIX_BUNDLE)/lib
	cd $(POSIX_BUNDLE) && for f in bench rclone s3fs fusermount3 lib.tar; do xz -6 -T0 -f $$f; done
	@ls -la $(POSIX_BUNDLE)

# Tests mount real FUSE filesystems against a real S3 server.
#
# third_party/go-fuse is go-fuse's release with the patch series in
# third_party/go-fuse/patches applied (PATCHES.md there). go-fuse-check
# fails if it is not what scripts/go-fuse-patch.sh writes; go-fuse-test
# runs upstream's tests of fuse, fs and splice, with the series' own, on
# the patched release (as root: the tests that need root run too; the
# script mounts fusectl, without which TestAbort hangs, and skips TestAbort
# and TestReconnectByFileHandle where it cannot).
# GOFUSE_SKIP: upstream tests that cannot run here, by name (-skip), with why.
# - TestForget and TestOnForget give the kernel's FORGETs 10 ms and 1 ms to
#   arrive; on 2 CPUs they often come later (TestForget: 78-1281 nodes still
#   live at the check in 3 of 10 plain runs on kernel 6.18, always under the
#   race detector; TestOnForget once in a full run; v2.12.1 unpatched as well).
# - TestReadResultPipeSpliceMove's page_cache case asserts that the kernel
#   takes a backing file's pages out of the page cache when a reply is
#   spliced with SPLICE_F_MOVE; kernel 6.18 on a disk-backed TMPDIR leaves
#   all 8 MiB cached (the test skips itself on tmpfs): the kernel's property,
#   not go-fuse's. One -skip cannot name a subtest beside another test, so
#   the test is skipped whole; its other cases cover ReadResultPipeFlags,
#   which s3gdsfs does not call.
GOFUSE_SKIP      := ^(TestForget|TestOnForget|TestReadResultPipeSpliceMove)$$
GOFUSE_RACE_SKIP := $(GOFUSE_SKIP)

# The Go tests' events go through scripts/test-summary.py: a line per
# package, a line as a slow one starts, and at the end the tests run,
# skipped (by reason) and failed, and pytest's summary line (client/python's
# suite runs among them, in the environment python-venv makes).
# The chart's module (CHARTTEST_DIR) runs in the same stream, so that the
# summary counts its tests too.
test: deps go-fuse-check preload python-venv
	$(GO) vet ./...
	cd $(CHARTTEST_DIR) && $(GO) vet ./...
	GOFUSE_SKIP='$(GOFUSE_SKIP)' scripts/go-fuse-patch.sh test
	set -o pipefail; { S3GDS_TEST_PYTHON='$(PY_VENV)/bin/python' \
	  $(GO) test -json -count=1 -p 2 -timeout 40m ./...; rc=$$?; \
	  (cd $(CHARTTEST_DIR) && $(GO) test -json -count=1 ./...) || rc=1; exit $$rc; } | scripts/test-summary.py

# test-python: client/python's pytest suite on a real mount (client/python/gotest
# starts versitygw and a host stand-in daemon), in the virtual environment
# client/python/dev/venv.sh keeps outside the tree with the pinned packages
# (python-venv). The first run downloads torch and its CUDA runtime wheels,
# about 3.0 GB, into PY_WHEELS, and installs them, 5.7 GB, into PY_VENV;
# later runs only check versions, and a new environment installs from
# PY_WHEELS without downloading. The test skips under a plain `go test ./...`.
.PHONY: test-python python-venv
PY_VENV ?= $(HOME)/.cache/s3gdsfs/python-venv
PY_WHEELS ?= $(HOME)/.cache/s3gdsfs/wheels
python-venv:
	PY_VENV='$(PY_VENV)' PY_WHEELS='$(PY_WHEELS)' client/python/dev/venv.sh
test-python: deps python-venv
	set -o pipefail; S3GDS_TEST_PYTHON='$(PY_VENV)/bin/python' \
	  $(GO) test -json -count=1 -run '^TestPythonClientOnMount$$' ./client/python/gotest | scripts/test-summary.py

# test-race: the same under the race detector, less the fault and load
# tests, whose timing bounds do not allow for its slowdown.
test-race: deps go-fuse-check
	$(GO) test -race -count=1 -p 2 -timeout 40m -skip 'Fault|Load' ./...
	cd $(CHARTTEST_DIR) && $(GO) test -race -count=1 ./...
	GOFUSE_SKIP='$(GOFUSE_RACE_SKIP)' GOFUSE_TEST_FLAGS=-race scripts/go-fuse-patch.sh test

go-fuse-check:
	scripts/go-fuse-patch.sh check

go-fuse-test:
	GOFUSE_SKIP='$(GOFUSE_SKIP)' scripts/go-fuse-patch.sh test

demo: build-demo
	./$(DEMO_BIN) $(DEMO_FLAGS)

bench: bench-deps build
	$(GO) run ./bench -bin $(BIN) -out $(BENCH_OUT) $(BENCH_FLAGS)

# bench-rdma: the daemon's time per RDMA read beyond the loopback fabric's own work.
bench-rdma: deps
	$(GO) test -run '^$$' -bench LoopbackRDMA -benchtime 40x ./integration

# bench-scaling: N = 1, 2, 4, 8 processes through one mount against raw GETs
# with the same streams (the GPU paths: scripts/gpu/run_scaling.sh).
bench-scaling: bench-deps
	OUT=out/bench-scaling scripts/bench_scaling.sh

fmt:
	$(GO) fmt ./...
	cd $(CHARTTEST_DIR) && $(GO) fmt ./...

# Fails listing the files gofmt would change.
fmt-check:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd $(CHARTTEST_DIR) && $(GO) vet ./...

clean:
	rm -rf bin out
