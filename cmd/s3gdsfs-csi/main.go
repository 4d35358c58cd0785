// Command s3gdsfs-csi is s3gdsfs's Kubernetes CSI driver (docs/kubernetes.md):
//
//	s3gdsfs-csi --endpoint unix:///csi/csi.sock --node-id NODE [flags]        (node plugin)
//	s3gdsfs-csi --endpoint unix:///csi/csi.sock --controller --node=false     (provisioner's driver)
//
// The node plugin runs `s3gdsfs mount` once per volume and node as its
// child; it is a program of its own so that s3gdsfs links no gRPC, and the
// daemon in a pod is the same command as on a host.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/csi"
)

// version is the release, stamped in by the Makefile (-X main.version=...).
var version string

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "s3gdsfs-csi:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(args []string) error {
	fs := flag.NewFlagSet("s3gdsfs-csi", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "unix:///csi/csi.sock", "the CSI socket, unix:///path")
	nodeID := fs.String("node-id", "", "this node's name (the node plugin; from the downward API's spec.nodeName)")
	name := fs.String("driver-name", csi.DefaultName, "the driver's name, the CSIDriver object's")
	node := fs.Bool("node", true, "serve the Node service: run the volumes' daemons")
	controller := fs.Bool("controller", false, "serve the Controller service: a prefix of a bucket per claim")
	binary := fs.String("s3gdsfs", "", "the s3gdsfs command the node runs per volume (default: s3gdsfs beside this program, else on $PATH)")
	memoryLimit := fs.String("daemon-memory-limit", "", "--memory-limit of every daemon (the chart derives the container's limit from it); empty: the command's default")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error: the driver's and the daemons'")
	stateDir := fs.String("state-dir", "/var/lib/s3gdsfs-csi", "where each volume's uploads journal is kept (a hostPath, so that a daemon started again finds it)")
	maxVolumes := fs.Int64("max-volumes", 0, "the most volumes a node takes, as the scheduler counts them; 0: no bound")
	var mountFlags multiFlag
	fs.Var(&mountFlags, "mount-flag", "a flag given to every daemon before the volume's options (repeatable), e.g. --mount-flag=--gpu=off")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level %s: use debug, info, warn or error", errUsage, *logLevel)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg := csi.Config{Name: *name, Version: version, NodeID: *nodeID, MaxVolumes: *maxVolumes, Controller: *controller, Log: log}
	if *node {
		if *nodeID == "" {
			return fmt.Errorf("%w: --node-id is required for the Node service", errUsage)
		}
		bin, err := findS3gdsfs(*binary)
		if err != nil {
			return err
		}
		flags := []string{"--log-level", strings.ToLower(level.String())}
		if *memoryLimit != "" {
			flags = append(flags, "--memory-limit", *memoryLimit)
		}
		flags = append(flags, mountFlags...)
		journal := ""
		if *stateDir != "" {
			journal = filepath.Join(*stateDir, "journal")
		}
		cfg.Volumes = csi.NewVolumes(csi.Launcher{Binary: bin, Flags: flags, JournalDir: journal, Log: log})
	}
	if !*node && !*controller {
		return fmt.Errorf("%w: neither --node nor --controller: nothing to serve", errUsage)
	}
	lis, err := csi.Listen(*endpoint)
	if err != nil {
		return err
	}
	srv := csi.New(cfg).Server()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		// The daemons are left serving the pods that have them until the
		// container ends them (docs/kubernetes.md: drain a node before
		// replacing its plugin).
		log.Info("stopping the CSI server; the volumes' daemons are left to the container's end", "signal", s.String())
		srv.GracefulStop()
	}()
	log.Info("serving CSI", "endpoint", *endpoint, "driver", *name, "node", *node, "controller", *controller, "version", version)
	return srv.Serve(lis)
}

// findS3gdsfs is --s3gdsfs, else s3gdsfs beside this program, else on $PATH.
func findS3gdsfs(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "s3gdsfs")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("s3gdsfs")
	if err != nil {
		return "", fmt.Errorf("%w: no s3gdsfs beside this program or on $PATH; name it with --s3gdsfs", errUsage)
	}
	return p, nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
