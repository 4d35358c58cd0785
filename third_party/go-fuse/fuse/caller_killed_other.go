//go:build !linux

// s3gdsfs patch (PATCHES.md): MountOptions.CancelOnlyKilled is Linux only;
// elsewhere every interrupt cancels its request.

package fuse

func callerKilled(tid uint32) bool { return true }
