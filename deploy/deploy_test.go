package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/longhaul-rl/longhaul/config"
)

// objects decodes every document of every manifest in deploy/kubernetes
// strictly into its k8s.io/api type: an unknown or misspelt field, a
// value of the wrong type, or a kind this test does not know fails.
func objects(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "batch/v1 Job":
				obj = &batchv1.Job{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "v1 PersistentVolumeClaim":
				obj = &corev1.PersistentVolumeClaim{}
			default:
				t.Fatalf("%s document %d: kind %q %q not checked by this test", f, i+1, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", f, i+1, head.Kind, err)
			}
			out[head.Kind+"/"+nameOf(obj)] = obj
		}
	}
	return out
}

func nameOf(obj any) string {
	switch o := obj.(type) {
	case *batchv1.Job:
		return o.Name
	case *appsv1.Deployment:
		return o.Name
	case *corev1.Service:
		return o.Name
	case *corev1.Secret:
		return o.Name
	case *corev1.ConfigMap:
		return o.Name
	case *corev1.PersistentVolumeClaim:
		return o.Name
	}
	return ""
}

func get[T any](t *testing.T, objs map[string]any, key string) T {
	t.Helper()
	o, ok := objs[key].(T)
	if !ok {
		t.Fatalf("no %s among %v", key, keys(objs))
	}
	return o
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mountPath(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

// TestKubernetesManifests: the manifests decode strictly, and say what
// docs/storage.md promises: the controller Job resumes on any node (its
// local directory an emptyDir, a disruption not counted as a failure),
// its credentials come from the Secret under the AWS tools' names, its
// config is a valid longhaul config whose run lives in a bucket and whose
// cache is that emptyDir, the trainer runs under torchrun as a sidecar
// sharing the cache, and vLLM reads exports at the path the controller
// writes them.
func TestKubernetesManifests(t *testing.T) {
	objs := objects(t)
	job := get[*batchv1.Job](t, objs, "Job/longhaul-controller")
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || job.Spec.PodFailurePolicy == nil {
		t.Fatal("the controller Job needs restartPolicy Never and a podFailurePolicy")
	}
	ignores := false
	for _, r := range job.Spec.PodFailurePolicy.Rules {
		for _, c := range r.OnPodConditions {
			ignores = ignores || (r.Action == batchv1.PodFailurePolicyActionIgnore && c.Type == corev1.DisruptionTarget)
		}
	}
	if !ignores {
		t.Fatal("a node loss (DisruptionTarget) must not count against the Job's backoffLimit")
	}
	var ctrl, trainer corev1.Container
	for _, c := range pod.Containers {
		if c.Name == "controller" {
			ctrl = c
		}
	}
	for _, c := range pod.InitContainers {
		if c.Name == "trainer" {
			trainer = c
		}
	}
	if ctrl.Name == "" || trainer.Name == "" {
		t.Fatal("the Job needs a controller container and a trainer sidecar")
	}
	if trainer.RestartPolicy == nil || *trainer.RestartPolicy != corev1.ContainerRestartPolicyAlways || len(trainer.Command) == 0 || trainer.Command[0] != "torchrun" {
		t.Fatal("the trainer must be a native sidecar (restartPolicy Always) run by torchrun")
	}
	secret := get[*corev1.Secret](t, objs, "Secret/longhaul-s3")
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} {
		if _, ok := secret.StringData[k]; !ok {
			t.Fatalf("the Secret lacks %s", k)
		}
	}
	if len(ctrl.EnvFrom) != 1 || ctrl.EnvFrom[0].SecretRef == nil || ctrl.EnvFrom[0].SecretRef.Name != secret.Name {
		t.Fatal("the controller must take its environment from the Secret")
	}
	var cache *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == "cache" {
			cache = &pod.Volumes[i]
		}
	}
	if cache == nil || cache.EmptyDir == nil || mountPath(ctrl, "cache") != "/cache" || mountPath(trainer, "cache") != "/cache" {
		t.Fatal("controller and trainer must share the cache, an emptyDir at /cache")
	}
	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/longhaul-run")
	cfg, err := config.Parse("run.yaml", []byte(cm.Data["run.yaml"]))
	if err != nil {
		t.Fatalf("the ConfigMap's run.yaml is not a valid longhaul config: %v", err)
	}
	if !strings.HasPrefix(cfg.Store.RunDir, "s3://") || !strings.HasPrefix(cfg.Store.CacheDir, "/cache/") {
		t.Fatalf("store.run_dir %q must be a bucket and store.cache_dir %q under the emptyDir", cfg.Store.RunDir, cfg.Store.CacheDir)
	}
	if got := job.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || float64(*got) <= cfg.Store.FinalSyncTimeoutS {
		t.Fatal("terminationGracePeriodSeconds must leave time for store.final_sync_timeout_s")
	}
	weights := filepath.Join(cfg.Store.CacheDir, "weights")
	vllm := get[*appsv1.Deployment](t, objs, "Deployment/longhaul-vllm")
	if mountPath(ctrl, "weights") != weights || mountPath(vllm.Spec.Template.Spec.Containers[0], "weights") != weights {
		t.Fatalf("controller and vLLM must mount the weights volume at %s, where exports are written", weights)
	}
	svc := get[*corev1.Service](t, objs, "Service/longhaul-vllm")
	if len(cfg.Generator.URLs) == 0 || !strings.Contains(cfg.Generator.URLs[0], svc.Name) {
		t.Fatalf("generator.urls %v must name the vLLM Service %s", cfg.Generator.URLs, svc.Name)
	}
}

// A misspelt field is refused: the strict decoding is not a formality.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	doc := []byte("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: x\nspec:\n  backofLimit: 3\n")
	if err := yaml.UnmarshalStrict(doc, &batchv1.Job{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("backofLimit")) {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}
