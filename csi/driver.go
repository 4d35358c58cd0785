// Package csi is s3gdsfs's Container Storage Interface driver: the
// Identity service, a Controller that provisions a prefix of a bucket per
// claim (and accepts static volumes), and a Node service that runs one
// s3gdsfs daemon per volume and node, shared by every pod on the node
// through bind mounts (docs/kubernetes.md).
package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// DefaultName is the driver's name, the CSIDriver object's.
const DefaultName = "csi.s3gdsfs.io"

// Config is what the driver serves.
type Config struct {
	Name    string // DefaultName if empty
	Version string
	// NodeID is the node's name; with Volumes set the Node service runs.
	NodeID  string
	Volumes *Volumes
	// MaxVolumes is the most volumes one node takes (the scheduler counts
	// them); 0: no bound.
	MaxVolumes int64
	// Controller runs the Controller service.
	Controller bool
	Log        *slog.Logger
}

// Driver implements the CSI services.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
	cfg Config
}

// New returns the driver for cfg.
func New(cfg Config) *Driver {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Driver{cfg: cfg}
}

// Listen opens the endpoint (unix:///path/csi.sock, or a bare path),
// removing a socket a former run left.
func Listen(endpoint string) (net.Listener, error) {
	path := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || u.Scheme != "unix" {
			return nil, fmt.Errorf("--endpoint %s: want unix:///path/to/csi.sock", endpoint)
		}
		path = u.Path
	}
	if path == "" {
		return nil, fmt.Errorf("--endpoint %s: no socket path", endpoint)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--endpoint %s: removing the old socket: %v", endpoint, err)
	}
	return net.Listen("unix", path)
}

// Server is a gRPC server with the driver's services registered; requests
// are logged by method and volume, never with their secrets.
func (d *Driver) Server() *grpc.Server {
	s := grpc.NewServer(grpc.UnaryInterceptor(d.logCall))
	csi.RegisterIdentityServer(s, d)
	if d.cfg.Controller {
		csi.RegisterControllerServer(s, d)
	}
	if d.cfg.Volumes != nil {
		csi.RegisterNodeServer(s, d)
	}
	return s
}

// volumeRequest is what the requests that name a volume have in common.
type volumeRequest interface{ GetVolumeId() string }

func (d *Driver) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	var attrs []any
	if r, ok := req.(volumeRequest); ok {
		attrs = append(attrs, "volume", r.GetVolumeId())
	}
	resp, err := handler(ctx, req)
	switch {
	case err != nil:
		d.cfg.Log.Warn(method, append(attrs, "code", status.Code(err).String(), "err", status.Convert(err).Message())...)
	case method == "Probe" || method == "NodeGetCapabilities" || method == "GetPluginInfo":
		d.cfg.Log.Debug(method, attrs...)
	default:
		d.cfg.Log.Info(method, attrs...)
	}
	return resp, err
}

// Identity.

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: d.cfg.Version}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	if d.cfg.Controller {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}
