package daemon

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// FuseMaxPagesLimit is the sysctl that bounds the pages of one FUSE
// request (kernel 6.13 and later; 256, 1 MiB, by default). Kernels
// without it take at most 1 MiB.
const FuseMaxPagesLimit = "/proc/sys/fs/fuse/max_pages_limit"

// fuseMaxRead is the largest FUSE read the kernel will send on a mount
// that asks for want: want where fs.fuse.max_pages_limit allows it or
// this process (root) raised it, else what the limit allows. raisedFrom
// is the limit before it was raised ("" when left alone); why says why
// want was cut.
func fuseMaxRead(want int) (got int, raisedFrom string, why string) {
	page := os.Getpagesize()
	const oldKernelMax = 1 << 20
	old, err := os.ReadFile(FuseMaxPagesLimit)
	if err != nil {
		if want > oldKernelMax {
			return oldKernelMax, "", "the kernel has no " + FuseMaxPagesLimit + ": its largest FUSE request is 1 MiB"
		}
		return want, "", ""
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(old)))
	if err != nil || cur <= 0 {
		return min(want, oldKernelMax), "", fmt.Sprintf("%s reads %q", FuseMaxPagesLimit, strings.TrimSpace(string(old)))
	}
	pages := (want + page - 1) / page
	if pages <= cur {
		return want, "", ""
	}
	allowed := cur * page
	if os.Geteuid() != 0 {
		return allowed, "", fmt.Sprintf("fs.fuse.max_pages_limit is %d pages: only root may raise it to %d", cur, pages)
	}
	if err := os.WriteFile(FuseMaxPagesLimit, []byte(strconv.Itoa(pages)), 0o644); err != nil {
		return allowed, "", fmt.Sprintf("raising fs.fuse.max_pages_limit to %d: %v", pages, err)
	}
	return want, strconv.Itoa(cur), ""
}
