package fs

import "testing"

func TestStatusHasGroup(t *testing.T) {
	status := "Name:\tchild\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nGroups:\t27 4242 \nNgid:\t0\n"
	for gid, want := range map[uint32]bool{27: true, 4242: true, 424: false, 65534: false} {
		if got := statusHasGroup(status, gid); got != want {
			t.Errorf("statusHasGroup(%d) = %v, want %v", gid, got, want)
		}
	}
	if statusHasGroup("Name:\tx\nGroups:\t\n", 0) {
		t.Error("an empty Groups: line lists gid 0")
	}
}
