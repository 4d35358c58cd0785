// Package charttest renders the Helm chart deploy/helm/s3gdsfs-csi with
// Helm's own engine and decodes every object strictly into the Kubernetes
// API types: a field the API does not have, or a value of the wrong type,
// fails. It is a module of its own so that Helm and k8s.io/api stay out
// of s3gdsfs's go.mod.
package charttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/s3gdsfs-csi"

// newObject is the API type of each kind the chart makes.
var newObject = map[string]func() any{
	"v1/ServiceAccount":        func() any { return &corev1.ServiceAccount{} },
	"v1/Secret":                func() any { return &corev1.Secret{} },
	"v1/PersistentVolume":      func() any { return &corev1.PersistentVolume{} },
	"v1/PersistentVolumeClaim": func() any { return &corev1.PersistentVolumeClaim{} },
	"v1/Pod":                   func() any { return &corev1.Pod{} },
	"apps/v1/DaemonSet":        func() any { return &appsv1.DaemonSet{} },
	"apps/v1/Deployment":       func() any { return &appsv1.Deployment{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"storage.k8s.io/v1/CSIDriver":                     func() any { return &storagev1.CSIDriver{} },
	"storage.k8s.io/v1/StorageClass":                  func() any { return &storagev1.StorageClass{} },
}

// render renders the chart with values over its values.yaml and decodes
// each object strictly, by kind and name.
func render(t *testing.T, values map[string]any) map[string]any {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := util.ToRenderValues(chrt, values, common.ReleaseOptions{Name: "s3gdsfs", Namespace: "storage", IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(chrt, vals)
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string]any{}
	for name, text := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for i, doc := range strings.Split(text, "\n---") {
			if isEmptyYAML(doc) {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s, document %d: %v\n%s", name, i, err, doc)
			}
			mk := newObject[tm.APIVersion+"/"+tm.Kind]
			if mk == nil {
				t.Fatalf("%s, document %d: kind %s/%s is not one this test decodes", name, i, tm.APIVersion, tm.Kind)
			}
			obj := mk()
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s, document %d (%s): not a valid %s: %v\n%s", name, i, tm.Kind, tm.Kind, err, doc)
			}
			key := tm.Kind + "/" + obj.(metav1.Object).GetName()
			if _, dup := objects[key]; dup {
				t.Fatalf("%s twice", key)
			}
			objects[key] = obj
		}
	}
	return objects
}

func isEmptyYAML(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func get[T any](t *testing.T, objects map[string]any, key string) T {
	t.Helper()
	o, ok := objects[key].(T)
	if !ok {
		keys := make([]string, 0, len(objects))
		for k := range objects {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("no %s among %v", key, keys)
	}
	return o
}

// TestChartDefaultsDecodeStrictlyAndDeriveTheMemoryLimit: the default
// render is valid API objects, the node plugin has what FUSE mounts and GPU
// reads from pods need, and its memory limit covers maxVolumes daemons of
// the --memory-limit it passes them.
func TestChartDefaultsDecodeStrictlyAndDeriveTheMemoryLimit(t *testing.T) {
	objs := render(t, nil)
	for _, want := range []string{"CSIDriver/csi.s3gdsfs.io", "DaemonSet/s3gdsfs-csi-node", "Deployment/s3gdsfs-csi-controller",
		"ServiceAccount/s3gdsfs-csi-node", "ServiceAccount/s3gdsfs-csi-controller",
		"ClusterRole/s3gdsfs-csi-provisioner", "ClusterRoleBinding/s3gdsfs-csi-provisioner"} {
		if objs[want] == nil {
			t.Errorf("the default render has no %s", want)
		}
	}
	if len(objs) != 7 {
		t.Errorf("the default render has %d objects, want 7 (no StorageClass or examples unless asked)", len(objs))
	}
	drv := get[*storagev1.CSIDriver](t, objs, "CSIDriver/csi.s3gdsfs.io")
	if drv.Spec.AttachRequired == nil || *drv.Spec.AttachRequired {
		t.Errorf("CSIDriver attachRequired: want false (the driver has no ControllerPublish)")
	}
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet/s3gdsfs-csi-node")
	pod := ds.Spec.Template.Spec
	if !pod.HostPID {
		t.Errorf("the node plugin is not hostPID: FUSE would name pods' readers with PID 0")
	}
	c := container(t, pod, "s3gdsfs-csi")
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("the node plugin is not privileged: it cannot mount")
	}
	bidirectional := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/var/lib/kubelet" && m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			bidirectional = true
		}
	}
	if !bidirectional {
		t.Errorf("kubelet's directory is not mounted Bidirectional into the node plugin: pods would not see its mounts")
	}
	checkMemory(t, c, 2048, 4, 0)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != "all" || env["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" {
		t.Errorf("the daemons' GPU environment: %v", env)
	}
	container(t, pod, "node-driver-registrar")
	ctrl := get[*appsv1.Deployment](t, objs, "Deployment/s3gdsfs-csi-controller")
	if args := container(t, ctrl.Spec.Template.Spec, "s3gdsfs-csi").Args; !slices.Contains(args, "--controller") || !slices.Contains(args, "--node=false") {
		t.Errorf("the controller's driver args %q: want --controller --node=false", args)
	}
}

// checkMemory holds the node plugin's memory limit to maxVolumes daemons
// of 1.25 x --memory-limit, their staging (1024 MiB per GPU by default)
// and 64 MiB each, plus 64 MiB of its own, and its --daemon-memory-limit
// to the value it is derived from.
func checkMemory(t *testing.T, c corev1.Container, memoryLimitMiB, maxVolumes, gpus int64) {
	t.Helper()
	perDaemon := memoryLimitMiB*5/4 + 1024*gpus + 64
	want := resource.MustParse(fmt.Sprintf("%dMi", maxVolumes*perDaemon+64))
	got := c.Resources.Limits[corev1.ResourceMemory]
	if got.Cmp(want) != 0 {
		t.Errorf("node plugin memory limit %s, want %s (%d volumes x %d MiB + 64 MiB)", got.String(), want.String(), maxVolumes, perDaemon)
	}
	if arg := fmt.Sprintf("--daemon-memory-limit=%dMiB", memoryLimitMiB); !slices.Contains(c.Args, arg) {
		t.Errorf("node plugin args %q lack %s", c.Args, arg)
	}
	if arg := fmt.Sprintf("--max-volumes=%d", maxVolumes); !slices.Contains(c.Args, arg) {
		t.Errorf("node plugin args %q lack %s: the scheduler would place more volumes than the limit covers", c.Args, arg)
	}
}

// TestChartMemoryLimitFollowsValues: other values give the limit the same
// derivation.
func TestChartMemoryLimitFollowsValues(t *testing.T) {
	objs := render(t, map[string]any{
		"daemon": map[string]any{"memoryLimitMiB": 4096},
		"node":   map[string]any{"maxVolumes": 2, "gpusPerNode": 8},
	})
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet/s3gdsfs-csi-node")
	checkMemory(t, container(t, ds.Spec.Template.Spec, "s3gdsfs-csi"), 4096, 2, 8)
}

// TestChartStorageClassAndExamplesDecodeStrictly: the StorageClass and
// the example Secret, PV, claims and pod are valid objects that name the
// driver, the bucket and the Secret as the driver reads them.
func TestChartStorageClassAndExamplesDecodeStrictly(t *testing.T) {
	objs := render(t, map[string]any{
		"storageClass": map[string]any{"create": true, "endpoint": "http://s3.example.com", "bucket": "ckpt",
			"mountOptions": []any{"allow-writes"}},
		"examples": map[string]any{"enabled": true},
	})
	sc := get[*storagev1.StorageClass](t, objs, "StorageClass/s3gdsfs")
	if sc.Provisioner != "csi.s3gdsfs.io" || sc.Parameters["bucket"] != "ckpt" || sc.Parameters["basePrefix"] != "claims" ||
		sc.Parameters["csi.storage.k8s.io/node-publish-secret-name"] != "s3gdsfs-credentials" ||
		sc.Parameters["csi.storage.k8s.io/node-publish-secret-namespace"] != "storage" {
		t.Errorf("StorageClass: %+v", sc)
	}
	if !slices.Equal(sc.MountOptions, []string{"allow-writes"}) {
		t.Errorf("StorageClass mountOptions %q", sc.MountOptions)
	}
	pv := get[*corev1.PersistentVolume](t, objs, "PersistentVolume/s3gdsfs-example-imagenet")
	src := pv.Spec.CSI
	if src == nil || src.Driver != "csi.s3gdsfs.io" || src.VolumeAttributes["bucket"] != "training" ||
		src.VolumeAttributes["prefix"] != "imagenet" || src.NodePublishSecretRef == nil || !src.ReadOnly {
		t.Errorf("static PV's CSI source: %+v", src)
	}
	secret := get[*corev1.Secret](t, objs, "Secret/s3gdsfs-credentials")
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := secret.StringData[k]; !ok {
			t.Errorf("the example Secret lacks %s, which the driver reads", k)
		}
	}
	get[*corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim/s3gdsfs-example-static")
	get[*corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim/s3gdsfs-example-dynamic")
	get[*corev1.Pod](t, objs, "Pod/s3gdsfs-example-reader")
}

// TestChartRefusesAStorageClassWithoutBucket: the chart names the value
// that is missing.
func TestChartRefusesAStorageClassWithoutBucket(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := util.ToRenderValues(chrt, map[string]any{"storageClass": map[string]any{"create": true, "endpoint": "http://x"}},
		common.ReleaseOptions{Name: "s3gdsfs", Namespace: "storage"}, common.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Render(chrt, vals); err == nil || !strings.Contains(err.Error(), "storageClass.bucket is required") {
		t.Errorf("render without storageClass.bucket: %v, want an error naming it", err)
	}
}
