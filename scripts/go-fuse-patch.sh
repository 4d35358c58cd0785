#!/usr/bin/env bash
# Builds third_party/go-fuse from the pristine go-fuse release that go.mod
# requires and the patch series in third_party/go-fuse/patches
# (third_party/go-fuse/PATCHES.md says why each patch exists and how to
# move to a new release).
#
#   scripts/go-fuse-patch.sh [apply]   write third_party/go-fuse: the release with the series applied
#   scripts/go-fuse-patch.sh check     fail if third_party/go-fuse is not what apply writes
#   scripts/go-fuse-patch.sh test      vet and run upstream's tests of fuse, fs and splice on the
#                                      patched release; GOFUSE_SKIP: a -skip pattern of tests
#                                      to leave out, GOFUSE_TEST_FLAGS: more go test flags
#   scripts/go-fuse-patch.sh work DIR [VERSION]
#                                      a git repository in DIR: the release as its first commit
#                                      (tag base), each patch a commit on it; with VERSION, the
#                                      series rebased onto that release instead
#   scripts/go-fuse-patch.sh export DIR
#                                      rewrite the series from DIR's commits after its tag base,
#                                      and point go.mod and patches/BASE at base's release
#
# The release comes from the module cache (go mod download), checked
# against the hash in third_party/go-fuse/patches/BASE.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODULE=github.com/hanwen/go-fuse/v2
TREE=$ROOT/third_party/go-fuse
PATCHES=$TREE/patches
BASE=$PATCHES/BASE
GO=${GO:-go}
export GOWORK=off

die() { echo "go-fuse-patch: $*" >&2; exit 1; }

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/go-fuse-patch.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

# version: the release go.mod requires, which patches/BASE must name.
version() {
	local v b
	v=$(awk -v m="$MODULE" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$ROOT/go.mod")
	[ -n "$v" ] || die "go.mod requires no $MODULE"
	b=$(awk '{print $2}' "$BASE")
	[ "$v" = "$b" ] || die "go.mod requires $MODULE $v, the series in patches/ is for $b (patches/BASE)"
	echo "$v"
}

# download VERSION: the release's directory in the module cache, then its hash.
download() {
	(cd "$SCRATCH" && GOFLAGS= $GO mod download -json "$MODULE@$1") >"$SCRATCH/download.json" ||
		die "go mod download $MODULE@$1 failed"
	sed -n -e 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' -e 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p' "$SCRATCH/download.json"
}

# pristine VERSION DEST: the release's files, writable, in DEST; with
# CHECK_SUM set, its hash must be the one in patches/BASE.
pristine() {
	local out dir sum
	out=$(download "$1")
	dir=$(sed -n 1p <<<"$out")
	sum=$(sed -n 2p <<<"$out")
	[ -d "$dir" ] || die "go mod download $MODULE@$1 gave no directory"
	if [ -n "${CHECK_SUM:-}" ] && [ "$MODULE $1 $sum" != "$(cat "$BASE")" ]; then
		die "$MODULE@$1 in the module cache hashes to $sum, not as patches/BASE says"
	fi
	mkdir -p "$2"
	cp -R "$dir/." "$2/"
	chmod -R u+w "$2"
}

# patched DEST: the release go.mod requires, with the series applied, in DEST.
patched() {
	local v p
	v=$(version)
	CHECK_SUM=1 pristine "$v" "$1"
	for p in "$PATCHES"/[0-9][0-9][0-9][0-9]-*.patch; do
		# Outside a repository git apply is a strict patch(1): no fuzz.
		if command -v git >/dev/null; then
			(cd "$1" && GIT_DIR=/nonexistent git apply "$p")
		else
			patch -d "$1" -p1 --fuzz=0 --forward --no-backup-if-mismatch -s <"$p"
		fi || die "$(basename "$p") does not apply to $MODULE $v"
	done
}

# generate DEST: what third_party/go-fuse holds besides PATCHES.md and
# patches/: the non-test Go files of the packages of the patched release
# that fuse, fs and splice import on Linux, macOS or FreeBSD, and LICENSE,
# AUTHORS and go.mod as released.
generate() {
	local full=$SCRATCH/full pkgs pkg f
	patched "$full"
	pkgs=$(cd "$full" && for os in linux darwin freebsd; do
		GOOS=$os GOFLAGS=-mod=mod $GO list -e -deps -f '{{.ImportPath}}' ./fuse ./fs ./splice
	done | grep "^$MODULE/" | sort -u) || die "go list in the patched $MODULE failed"
	for pkg in $pkgs; do
		pkg=${pkg#"$MODULE"/}
		mkdir -p "$1/$pkg"
		for f in "$full/$pkg"/*; do
			case $f in
			*_test.go) ;;
			*.go | *.s) cp "$f" "$1/$pkg/" ;;
			esac
		done
	done
	for f in LICENSE AUTHORS go.mod; do cp "$full/$f" "$1/"; done
}

# identity DIR: a committer for DIR's repository, if git has none.
identity() {
	git -C "$1" config user.name >/dev/null || git -C "$1" config user.name "$(git -C "$ROOT" config user.name || echo go-fuse-patch)"
	git -C "$1" config user.email >/dev/null || git -C "$1" config user.email "$(git -C "$ROOT" config user.email || echo go-fuse-patch@invalid)"
}

cmd=${1:-apply}
[ $# -gt 0 ] && shift
case $cmd in
apply)
	generate "$SCRATCH/tree"
	find "$TREE" -mindepth 1 -maxdepth 1 ! -name PATCHES.md ! -name patches -exec rm -rf {} +
	cp -R "$SCRATCH/tree/." "$TREE/"
	echo "third_party/go-fuse: $MODULE $(version) with $(ls "$PATCHES"/*.patch | wc -l) patches"
	;;
check)
	generate "$SCRATCH/tree"
	if ! diff -r -x PATCHES.md -x patches "$SCRATCH/tree" "$TREE" >"$SCRATCH/diff"; then
		head -40 "$SCRATCH/diff" >&2
		die "third_party/go-fuse is not $MODULE $(version) with third_party/go-fuse/patches applied: change the patches, not the tree, and run scripts/go-fuse-patch.sh"
	fi
	echo "third_party/go-fuse is $MODULE $(version) with its $(ls "$PATCHES"/*.patch | wc -l) patches"
	;;
test)
	patched "$SCRATCH/full"
	skip=${GOFUSE_SKIP:-}
	# TestAbort and TestReconnectByFileHandle abort their connection
	# through the fusectl filesystem; without it TestAbort leaves a
	# request that no one answers and the package's run hangs.
	if ! grep -qs ' /sys/fs/fuse/connections fusectl ' /proc/mounts; then
		[ "$(id -u)" -ne 0 ] || mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null || true
	fi
	if ! grep -qs ' /sys/fs/fuse/connections fusectl ' /proc/mounts; then
		echo "go-fuse-patch: no fusectl at /sys/fs/fuse/connections: skipping TestAbort and TestReconnectByFileHandle" >&2
		skip=${skip:+$skip|}'^TestAbort$|^TestReconnectByFileHandle$'
	fi
	cd "$SCRATCH/full"
	GOFLAGS=-mod=mod $GO vet ./fuse ./fs ./splice
	# shellcheck disable=SC2086 # GOFUSE_TEST_FLAGS is a list of flags
	GOFLAGS=-mod=mod $GO test -count=1 -p 1 -timeout 10m ${skip:+-skip "$skip"} ${GOFUSE_TEST_FLAGS:-} ./fuse ./fs ./splice
	;;
work)
	dir=${1:?usage: work DIR [VERSION]}
	[ ! -e "$dir" ] || die "$dir exists"
	CHECK_SUM=1 pristine "$(version)" "$dir"
	dir=$(cd "$dir" && pwd)
	cd "$dir"
	git init -q
	identity "$dir"
	git add -A
	git commit -qm "$MODULE $(version)"
	git tag base
	git am -q "$PATCHES"/[0-9][0-9][0-9][0-9]-*.patch
	if [ -n "${2:-}" ]; then
		branch=$(git symbolic-ref --short HEAD)
		git tag old-base base
		git checkout -q --detach base
		git rm -rqf .
		pristine "$2" "$dir"
		git add -A
		git commit -qm "$MODULE $2"
		git tag -f base >/dev/null
		git checkout -q "$branch"
		echo "rebasing the series onto $MODULE $2 (after a conflict: resolve, git add, git rebase --continue)"
		git rebase -q --onto base old-base || exit 1
	fi
	git log --oneline base..HEAD
	;;
export)
	dir=${1:?usage: export DIR}
	v=$(git -C "$dir" log -1 --format=%s base | awk -v m="$MODULE" '$1 == m {print $2}')
	[ -n "$v" ] || die "$dir: the commit tagged base is not a release of $MODULE"
	sum=$(download "$v" | sed -n 2p)
	rm -f "$PATCHES"/[0-9][0-9][0-9][0-9]-*.patch
	git -C "$dir" format-patch -q --zero-commit --no-signature -o "$PATCHES" base..HEAD
	echo "$MODULE $v $sum" >"$BASE"
	(cd "$ROOT" && $GO mod edit -require="$MODULE@$v")
	ls "$PATCHES"
	echo "now: scripts/go-fuse-patch.sh && make test"
	;;
*)
	die "unknown command $cmd (apply, check, test, work, export)"
	;;
esac
