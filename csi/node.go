package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// The Node service: NodeStageVolume records the volume, the first
// NodePublishVolume starts its daemon at the staging path (with the
// credentials of the Secret kubelet passes, nodePublishSecretRef) and each
// binds it into a pod's volume path; the last NodeUnpublishVolume stops
// the daemon.

func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
			Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
	}}}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID, MaxVolumesPerNode: d.cfg.MaxVolumes}, nil
}

func (d *Driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, missing("volume id")
	case req.GetStagingTargetPath() == "":
		return nil, missing("staging target path")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	spec, err := specFromVolume(req.GetVolumeContext(), req.GetVolumeCapability().GetMount().GetMountFlags())
	if err != nil {
		return nil, err
	}
	creds, err := credentialsFrom(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if err := d.cfg.Volumes.Stage(req.GetVolumeId(), req.GetStagingTargetPath(), spec, creds); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *Driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, missing("volume id")
	case req.GetStagingTargetPath() == "":
		return nil, missing("staging target path")
	}
	if err := d.cfg.Volumes.Unstage(req.GetVolumeId(), req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, missing("volume id")
	case req.GetTargetPath() == "":
		return nil, missing("target path")
	}
	c := req.GetVolumeCapability()
	if err := checkCapability(c); err != nil {
		return nil, err
	}
	if req.GetStagingTargetPath() == "" {
		return nil, missing("staging target path")
	}
	creds, err := credentialsFrom(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	readOnly := req.GetReadonly() || readOnlyMode(c)
	if err := d.cfg.Volumes.Publish(req.GetVolumeId(), req.GetStagingTargetPath(), req.GetTargetPath(), readOnly, creds); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, missing("volume id")
	case req.GetTargetPath() == "":
		return nil, missing("target path")
	}
	if err := d.cfg.Volumes.Unpublish(req.GetVolumeId(), req.GetTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
