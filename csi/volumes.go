package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Volumes are the volumes of this node: per volume one daemon, mounted at
// the volume's staging path, and a bind mount of that mount per pod (per
// target path). The daemon starts with the first pod and stops with the
// last; one that dies while pods use it is started again and their bind
// mounts made anew.
type Volumes struct {
	launcher Launcher
	// StopGrace bounds the wait for a stopped daemon to exit before it
	// is killed; RestartBackoff is the first wait between failed
	// restarts (doubling up to a minute).
	StopGrace      time.Duration
	RestartBackoff time.Duration

	mu   sync.Mutex
	vols map[string]*volume
}

// NewVolumes returns the node's volume manager.
func NewVolumes(l Launcher) *Volumes {
	if l.Log == nil {
		l.Log = slog.Default()
	}
	return &Volumes{launcher: l, StopGrace: 30 * time.Second, RestartBackoff: time.Second, vols: map[string]*volume{}}
}

type volume struct {
	mu      sync.Mutex
	id      string
	staging string
	spec    MountSpec
	creds   Credentials     // the latest a request brought: a restart uses them
	targets map[string]bool // target path: read-only
	proc    *daemonProc     // nil while no pod uses the volume
	starts  int             // daemons started, the first included
}

func (v *Volumes) get(id string) *volume {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.vols[id]
}

// Stage records a volume for its staging path; the daemon starts with
// the first pod (Publish), which brings the Secret.
func (v *Volumes) Stage(id, staging string, spec MountSpec, creds Credentials) error {
	v.mu.Lock()
	vol := v.vols[id]
	if vol == nil {
		vol = &volume{id: id, staging: staging, spec: spec, targets: map[string]bool{}}
		v.vols[id] = vol
	}
	v.mu.Unlock()
	vol.mu.Lock()
	defer vol.mu.Unlock()
	if vol.staging != staging {
		return status.Errorf(codes.AlreadyExists, "volume %s is staged at %s, not %s", id, vol.staging, staging)
	}
	if !vol.spec.equal(spec) {
		return status.Errorf(codes.AlreadyExists, "volume %s is staged with other attributes or mount options", id)
	}
	if creds != nil {
		vol.creds = creds
	}
	return os.MkdirAll(staging, 0o750)
}

// Publish makes the volume visible at target, starting its daemon if no
// other pod has it.
func (v *Volumes) Publish(id, staging, target string, readOnly bool, creds Credentials) error {
	vol := v.get(id)
	if vol == nil {
		return status.Errorf(codes.FailedPrecondition, "volume %s is not staged on this node", id)
	}
	vol.mu.Lock()
	defer vol.mu.Unlock()
	if staging != "" && staging != vol.staging {
		return status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s, not %s", id, vol.staging, staging)
	}
	if ro, ok := vol.targets[target]; ok {
		if ro != readOnly {
			return status.Errorf(codes.AlreadyExists, "volume %s is published at %s with readonly %v", id, target, ro)
		}
		return nil
	}
	if creds != nil {
		vol.creds = creds
	}
	if vol.proc == nil {
		if err := v.startLocked(vol); err != nil {
			return err
		}
	}
	if err := bindMount(vol.staging, target, readOnly); err != nil {
		if len(vol.targets) == 0 {
			v.stopLocked(vol)
		}
		return status.Errorf(codes.Internal, "%v", err)
	}
	vol.targets[target] = readOnly
	v.launcher.Log.Info("volume published", "volume", id, "target", target, "readonly", readOnly, "pods", len(vol.targets))
	return nil
}

// Unpublish takes the volume off target (and removes the directory, as
// CSI asks); the last pod's stops the daemon.
func (v *Volumes) Unpublish(id, target string) error {
	vol := v.get(id)
	if vol != nil {
		vol.mu.Lock()
		defer vol.mu.Unlock()
	}
	if err := unmountAll(target); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "removing %s: %v", target, err)
	}
	if vol == nil {
		return nil
	}
	if _, ok := vol.targets[target]; !ok {
		return nil
	}
	delete(vol.targets, target)
	v.launcher.Log.Info("volume unpublished", "volume", id, "target", target, "pods", len(vol.targets))
	if len(vol.targets) == 0 {
		v.stopLocked(vol)
	}
	return nil
}

// Unstage forgets the volume; it is refused while a pod has it.
func (v *Volumes) Unstage(id, staging string) error {
	vol := v.get(id)
	if vol == nil {
		if err := unmountAll(staging); err != nil {
			return status.Errorf(codes.Internal, "%v", err)
		}
		return nil
	}
	vol.mu.Lock()
	defer vol.mu.Unlock()
	if len(vol.targets) > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is still published at %s", id, sortedKeys(vol.targets))
	}
	v.stopLocked(vol)
	if err := unmountAll(vol.staging); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	v.mu.Lock()
	delete(v.vols, id)
	v.mu.Unlock()
	return nil
}

// Daemon is the process id of the volume's daemon and how many daemons
// it has had; pid 0 while none runs.
func (v *Volumes) Daemon(id string) (pid, starts int) {
	vol := v.get(id)
	if vol == nil {
		return 0, 0
	}
	vol.mu.Lock()
	defer vol.mu.Unlock()
	if vol.proc == nil || vol.proc.exited() {
		return 0, vol.starts
	}
	return vol.proc.cmd.Process.Pid, vol.starts
}

// journal is the volume's uploads journal, under the launcher's JournalDir.
func (v *Volumes) journal(id string) string {
	if v.launcher.JournalDir == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(v.launcher.JournalDir, hex.EncodeToString(sum[:8]))
}

func (v *Volumes) startLocked(vol *volume) error {
	// A mount left at the staging path (a daemon that died while no pod
	// had the volume) is stale.
	detach(vol.staging)
	p, err := v.launcher.start(vol.spec, vol.staging, v.journal(vol.id), vol.creds)
	if err != nil {
		return err
	}
	vol.proc = p
	vol.starts++
	go v.watch(vol, p)
	return nil
}

func (v *Volumes) stopLocked(vol *volume) {
	if p := vol.proc; p != nil {
		vol.proc = nil // the watcher sees a stop it asked for
		p.stop(vol.staging, v.StopGrace)
		v.launcher.Log.Info("daemon stopped", "volume", vol.id, "pid", p.cmd.Process.Pid)
	}
}

// watch restarts the volume's daemon if it exits while pods have the
// volume: the new daemon mounts at the staging path, and each pod's bind
// mount, which held the dead mount, is made again from it.
func (v *Volumes) watch(vol *volume, p *daemonProc) {
	<-p.done
	backoff := v.RestartBackoff
	for {
		vol.mu.Lock()
		if vol.proc != p {
			vol.mu.Unlock()
			return // stopped on purpose, or already replaced
		}
		v.launcher.Log.Warn("daemon exited while pods use the volume: starting it again",
			"volume", vol.id, "pid", p.cmd.Process.Pid, "status", exitStatus(p.err), "pods", len(vol.targets))
		err := v.restartLocked(vol)
		vol.mu.Unlock()
		if err == nil {
			return
		}
		v.launcher.Log.Error("restarting the daemon failed; trying again", "volume", vol.id, "err", err, "in", backoff)
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Minute)
	}
}

func (v *Volumes) restartLocked(vol *volume) error {
	for t := range vol.targets {
		detach(t)
	}
	detach(vol.staging)
	old := vol.proc
	if err := v.startLocked(vol); err != nil {
		vol.proc = old // the watcher's loop goes on
		return err
	}
	var errs []error
	for t, ro := range vol.targets {
		if err := bindMount(vol.staging, t, ro); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		v.launcher.Log.Error("re-making a pod's bind mount failed", "volume", vol.id, "err", err)
	}
	return nil
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
