package csi

import (
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MountSpec is what one volume's daemon mounts: the store, the bucket and
// prefix, and the PV's mountOptions, which become the daemon's -o lists so
// that the command's own option table reads them (a bad one fails the
// start with the command's message, which names it).
type MountSpec struct {
	Endpoint string
	Bucket   string
	Prefix   string
	Region   string
	Options  []string
}

// Volume attributes (a PV's csi.volumeAttributes, or what CreateVolume
// returned) and StorageClass parameters.
const (
	attrEndpoint    = "endpoint"
	attrBucket      = "bucket"
	attrPrefix      = "prefix"
	attrRegion      = "region"
	paramBasePrefix = "basePrefix"
)

// driverOwnedOptions are mount options the node plugin sets itself, or
// takes from elsewhere, with why; a PV that names one is refused.
var driverOwnedOptions = map[string]string{
	"endpoint":         "the volume attribute endpoint sets it",
	"bucket":           "the volume attributes bucket and prefix set it",
	"region":           "the volume attribute region sets it",
	"credentials-file": "credentials come from the volume's Secret (nodePublishSecretRef)",
	"profile":          "credentials come from the volume's Secret (nodePublishSecretRef)",
	"foreground":       "the node plugin runs the daemon in the foreground to watch it",
	"log-file":         "the daemon logs to the node plugin's output",
	"upload-journal":   "the node plugin gives each volume a journal of its own under --state-dir",
	"memory-limit":     "it is the node plugin's --daemon-memory-limit (values.yaml daemon.memoryLimitMiB), which the container's memory limit is derived from",
}

// specFromVolume reads a volume's attributes and its mount options. Keys
// with a '/' are Kubernetes' own (csi.storage.k8s.io/pod.name,
// storage.kubernetes.io/csiProvisionerIdentity) and ignored; any other
// unknown key is refused by name, so that a typo does not go unnoticed.
func specFromVolume(attrs map[string]string, mountFlags []string) (MountSpec, error) {
	var s MountSpec
	var unknown []string
	for k, v := range attrs {
		switch k {
		case attrEndpoint:
			s.Endpoint = v
		case attrBucket:
			s.Bucket = v
		case attrPrefix:
			s.Prefix = strings.Trim(v, "/")
		case attrRegion:
			s.Region = v
		default:
			if !strings.Contains(k, "/") {
				unknown = append(unknown, k)
			}
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return s, status.Errorf(codes.InvalidArgument, "volume attribute %s: unknown (known: %s, %s, %s, %s)",
			strings.Join(unknown, ", "), attrEndpoint, attrBucket, attrPrefix, attrRegion)
	}
	if s.Endpoint == "" {
		return s, status.Errorf(codes.InvalidArgument, "volume attribute %s is required (the S3 endpoint URL)", attrEndpoint)
	}
	if err := checkBucket(s.Bucket); err != nil {
		return s, err
	}
	if strings.Contains(s.Prefix, "//") {
		return s, status.Errorf(codes.InvalidArgument, "volume attribute %s %q: an empty segment", attrPrefix, s.Prefix)
	}
	for _, f := range mountFlags {
		for _, kv := range strings.Split(f, ",") {
			key, _, _ := strings.Cut(strings.TrimSpace(kv), "=")
			key = strings.TrimLeft(strings.ReplaceAll(key, "_", "-"), "-")
			if why, ok := driverOwnedOptions[key]; ok {
				return s, status.Errorf(codes.InvalidArgument, "mount option %s: not accepted here: %s", key, why)
			}
		}
	}
	s.Options = slices.Clone(mountFlags)
	return s, nil
}

// bucketName is S3's rule for bucket names (3 to 63 characters).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

func checkBucket(b string) error {
	if b == "" {
		return status.Errorf(codes.InvalidArgument, "volume attribute %s is required", attrBucket)
	}
	if !bucketName.MatchString(b) {
		return status.Errorf(codes.InvalidArgument, "volume attribute %s %q: not an S3 bucket name (3 to 63 of a-z, 0-9, '.', '-')", attrBucket, b)
	}
	return nil
}

// source is --bucket's NAME[/PREFIX].
func (s MountSpec) source() string {
	if s.Prefix == "" {
		return s.Bucket
	}
	return s.Bucket + "/" + s.Prefix
}

// equal says whether two specs mount the same thing the same way.
func (s MountSpec) equal(o MountSpec) bool {
	return s.Endpoint == o.Endpoint && s.Bucket == o.Bucket && s.Prefix == o.Prefix &&
		s.Region == o.Region && slices.Equal(s.Options, o.Options)
}

// Credentials are the environment the daemon reads its keys from (the
// command's standard chain), taken from the volume's Secret. They go into
// the child's environment only: never into its arguments or a log.
type Credentials map[string]string

// secretKeys are the keys a volume's Secret may hold: the environment
// variables of the same names.
var secretKeys = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// credentialsFrom checks a request's secrets; an error names the key,
// never a value.
func credentialsFrom(secrets map[string]string) (Credentials, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	c := Credentials{}
	for k, v := range secrets {
		if !slices.Contains(secretKeys, k) {
			return nil, status.Errorf(codes.InvalidArgument, "secret key %q: unknown (the Secret holds %s)", k, strings.Join(secretKeys, ", "))
		}
		c[k] = v
	}
	if (c["AWS_ACCESS_KEY_ID"] == "") != (c["AWS_SECRET_ACCESS_KEY"] == "") {
		return nil, status.Errorf(codes.InvalidArgument, "the Secret needs both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	return c, nil
}

// checkCapability accepts mount volumes of any access mode (a file system
// type, if named, must be s3gdsfs's); block volumes are not served.
func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume capability is required")
	}
	m := c.GetMount()
	if m == nil {
		return status.Error(codes.InvalidArgument, "volume capability: only mount volumes are served (access type block is not)")
	}
	switch m.GetFsType() {
	case "", "s3gdsfs", "fuse.s3gdsfs":
	default:
		return status.Errorf(codes.InvalidArgument, "volume capability: fsType %q: use fuse.s3gdsfs or leave it empty", m.GetFsType())
	}
	if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
		return status.Error(codes.InvalidArgument, "volume capability: access mode is required")
	}
	return nil
}

// readOnlyMode says whether an access mode allows no writer.
func readOnlyMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:
		return true
	}
	return false
}

func missing(field string) error {
	return status.Errorf(codes.InvalidArgument, "%s is required", field)
}
