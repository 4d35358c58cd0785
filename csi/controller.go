package csi

import (
	"context"
	"path"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The Controller provisions a volume per claim as a prefix of a bucket:
// the StorageClass names the endpoint, the bucket and a base prefix, and
// the claim's volume is basePrefix/<PV name>. The volume id is
// "bucket/prefix", and the volume's attributes carry what a node mounts.
// S3 prefixes need no making, so CreateVolume writes nothing; DeleteVolume
// leaves the objects in place (the data outlives its claim; deleting it is
// the store's business). Capacity is not enforced: a volume reports 0,
// unknown.

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}}, nil
}

func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, missing("name")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, missing("volume capabilities")
	}
	for _, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); err != nil {
			return nil, err
		}
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content source: snapshots and clones are not supported")
	}
	attrs := map[string]string{}
	base := ""
	for k, v := range req.GetParameters() {
		switch k {
		case paramBasePrefix:
			base = strings.Trim(v, "/")
		case attrPrefix:
			return nil, status.Errorf(codes.InvalidArgument, "StorageClass parameter %s: a claim's prefix is %s/<volume name>; use %s", attrPrefix, paramBasePrefix, paramBasePrefix)
		default:
			attrs[k] = v
		}
	}
	attrs[attrPrefix] = path.Join(base, req.GetName())
	spec, err := specFromVolume(attrs, nil)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "StorageClass parameters: %s", status.Convert(err).Message())
	}
	ctx := map[string]string{attrEndpoint: spec.Endpoint, attrBucket: spec.Bucket, attrPrefix: spec.Prefix}
	if spec.Region != "" {
		ctx[attrRegion] = spec.Region
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      spec.Bucket + "/" + spec.Prefix,
		CapacityBytes: 0,
		VolumeContext: ctx,
	}}, nil
}

func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, missing("volume id")
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, missing("volume id")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, missing("volume capabilities")
	}
	bucket, prefix, ok := strings.Cut(req.GetVolumeId(), "/")
	if !ok || prefix == "" || checkBucket(bucket) != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: not a volume this driver made (bucket/prefix)", req.GetVolumeId())
	}
	for _, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}
