// s3gdsfs patch (PATCHES.md): MountOptions.CancelOnlyKilled.

package fuse

import (
	"bytes"
	"os"
	"strconv"
)

// callerKilled says whether thread tid is being killed: a fatal signal
// (SIGKILL, or one whose default action ends the process) puts SIGKILL
// among every thread's pending signals (complete_signal in the kernel),
// which /proc shows in SigPnd. A thread that is gone counts as killed.
func callerKilled(tid uint32) bool {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return true
	}
	for _, field := range []string{"SigPnd:", "ShdPnd:"} {
		i := bytes.Index(b, []byte(field))
		if i < 0 {
			continue
		}
		line := b[i+len(field):]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		mask, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 64)
		if err == nil && mask&(1<<(9-1)) != 0 { // SIGKILL is signal 9
			return true
		}
	}
	return false
}
