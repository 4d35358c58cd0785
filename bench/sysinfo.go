package main

import (
	"bufio"
	"debug/buildinfo"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
)

type machineInfo struct {
	Hostname  string `json:"hostname"`
	Cores     int    `json:"cores"`
	CPU       string `json:"cpu"`
	MemoryGiB int64  `json:"memory_gib"`
	Kernel    string `json:"kernel"`
	OS        string `json:"os"`
	GoVersion string `json:"go_version"`
	Date      string `json:"date"`
}

func describeMachine() machineInfo {
	m := machineInfo{
		Cores:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Date:      time.Now().UTC().Format(time.RFC3339),
	}
	m.Hostname, _ = os.Hostname()
	m.CPU = procField("/proc/cpuinfo", "model name")
	var memKB int64
	fmt.Sscanf(procField("/proc/meminfo", "MemTotal"), "%d", &memKB)
	m.MemoryGiB = (memKB + 1<<19) >> 20
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	m.OS = strings.Trim(procField("/etc/os-release", "PRETTY_NAME"), `"`)
	return m
}

// procField returns the value of the first "key: value" or key=value line.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, sep := range []string{":", "="} {
			if k, v, ok := strings.Cut(line, sep); ok && strings.TrimSpace(k) == key {
				return strings.TrimSpace(v)
			}
		}
	}
	return ""
}

// versityGWVersion reads the module version Go stamped into the binary
// (the binary's own --version says "git" when built by go install).
func versityGWVersion(bin string) string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == "github.com/versity/versitygw" {
			return dep.Version
		}
	}
	if info.Main.Path == "github.com/versity/versitygw" {
		return info.Main.Version
	}
	return "unknown"
}

// cacheDropper empties the kernel page cache before timed runs so every
// run reads through the filesystem rather than from memory.
type cacheDropper struct {
	tried  bool
	failed error
}

func (c *cacheDropper) drop() {
	if c.tried && c.failed != nil {
		return
	}
	c.tried = true
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		c.failed = err
		progress("cannot drop the page cache (%v); repeated reads may be served from memory", err)
	}
}

func (c *cacheDropper) status() string {
	switch {
	case !c.tried:
		return "not dropped (no timed run)"
	case c.failed != nil:
		return "NOT dropped, not permitted: " + c.failed.Error() + " (repeated runs may be served from the page cache)"
	default:
		return "dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every timed run"
	}
}

// storageDir picks where versitygw keeps the objects: /dev/shm when it has
// room, so the server reads from memory and the disk is out of the picture.
func storageDir(need int64) (dir, why string) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err == nil {
		free := int64(st.Bavail) * st.Bsize
		if free >= need+need/10+512*mib {
			return "/dev/shm", fmt.Sprintf("/dev/shm (tmpfs, %d GiB free)", free/gib)
		}
		return os.TempDir(), fmt.Sprintf("%s (%s; /dev/shm has only %d MiB free, %d MiB needed)",
			os.TempDir(), fsType(os.TempDir()), free/mib, need/mib)
	}
	return os.TempDir(), fmt.Sprintf("%s (%s; no /dev/shm)", os.TempDir(), fsType(os.TempDir()))
}

func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown filesystem"
	}
	names := map[int64]string{0x01021994: "tmpfs", 0xef53: "ext4", 0x58465342: "xfs",
		0x9123683e: "btrfs", 0x794c7630: "overlayfs", 0x6969: "nfs", 0x2fc12fc1: "zfs"}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("filesystem type %#x", st.Type)
}
