package kubernetes

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// inferencePool mirrors the Inference Extension's InferencePool (inference.networking.k8s.io/v1)
// field for field: its Go module (sigs.k8s.io/gateway-api-inference-extension) is not served by
// the Go module proxy here, so the test decodes strictly into this copy of its schema.
type inferencePool struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace,omitempty"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
		EndpointPickerRef struct {
			Group *string `json:"group,omitempty"`
			Kind  string  `json:"kind,omitempty"`
			Name  string  `json:"name"`
			Port  *struct {
				Number int32 `json:"number"`
			} `json:"port,omitempty"`
			FailureMode string `json:"failureMode,omitempty"`
		} `json:"endpointPickerRef"`
	} `json:"spec"`
}

// prometheusConfig is the part of Prometheus' configuration the scrape ConfigMap uses, decoded
// strictly so a misspelt key fails.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval string `json:"scrape_interval"`
	} `json:"global"`
	ScrapeConfigs []struct {
		JobName             string `json:"job_name"`
		MetricsPath         string `json:"metrics_path"`
		KubernetesSDConfigs []struct {
			Role string `json:"role"`
		} `json:"kubernetes_sd_configs"`
		RelabelConfigs []struct {
			SourceLabels []string `json:"source_labels,omitempty"`
			Regex        string   `json:"regex,omitempty"`
			Action       string   `json:"action,omitempty"`
			TargetLabel  string   `json:"target_label,omitempty"`
		} `json:"relabel_configs"`
	} `json:"scrape_configs"`
}

// object is one decoded manifest document.
type object struct {
	file string
	kind string
	v    any
}

// decodeAll decodes every document of every manifest strictly (unknown or duplicate fields
// fail) into the type its apiVersion and kind name.
func decodeAll(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var tm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var v any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				v = &appsv1.Deployment{}
			case "v1 Service":
				v = &corev1.Service{}
			case "v1 ConfigMap":
				v = &corev1.ConfigMap{}
			case "v1 Secret":
				v = &corev1.Secret{}
			case "v1 ServiceAccount":
				v = &corev1.ServiceAccount{}
			case "rbac.authorization.k8s.io/v1 Role":
				v = &rbacv1.Role{}
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				v = &rbacv1.RoleBinding{}
			case "inference.networking.k8s.io/v1 InferencePool":
				v = &inferencePool{}
			default:
				t.Fatalf("%s document %d: no type for %s %s", f, i, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s document %d (%s): %v", f, i, tm.Kind, err)
			}
			out = append(out, object{file: f, kind: tm.Kind, v: v})
		}
	}
	return out
}

// TestManifestsDecodeStrictly: every manifest is valid for its API type, and what the engine
// needs of Kubernetes holds: readiness on /health, a grace period longer than preStop +
// --drain-delay + --shutdown-timeout, every flag one the binaries define.
func TestManifestsDecodeStrictly(t *testing.T) {
	objs := decodeAll(t)
	flags := binaryFlags(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind]++
		switch v := o.v.(type) {
		case *appsv1.Deployment:
			if v.Name == "llmserve" {
				checkEnginePod(t, o.file, &v.Spec.Template.Spec, flags)
			}
		case *corev1.ConfigMap:
			if prom, ok := v.Data["prometheus.yml"]; ok {
				var pc prometheusConfig
				if err := yaml.UnmarshalStrict([]byte(prom), &pc); err != nil {
					t.Errorf("%s: prometheus.yml: %v", o.file, err)
				} else if len(pc.ScrapeConfigs) == 0 || pc.ScrapeConfigs[0].MetricsPath != "/metrics" {
					t.Errorf("%s: prometheus.yml scrapes %+v, want /metrics", o.file, pc.ScrapeConfigs)
				}
			}
		case *inferencePool:
			if v.Spec.Selector.MatchLabels["app"] != "llmserve" || len(v.Spec.TargetPorts) != 1 || v.Spec.TargetPorts[0].Number != 30000 ||
				v.Spec.EndpointPickerRef.Name != "llmserve-epp" {
				t.Errorf("%s: InferencePool %+v does not select the engine's pods on 30000 with llmserve-epp", o.file, v.Spec)
			}
		}
	}
	for _, k := range []string{"Deployment", "Service", "ConfigMap", "InferencePool", "Role", "RoleBinding", "ServiceAccount"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests (%v)", k, kinds)
		}
	}
}

func checkEnginePod(t *testing.T, file string, pod *corev1.PodSpec, flags map[string]map[string]bool) {
	t.Helper()
	var tok *corev1.Container
	for i := range pod.Containers {
		c := &pod.Containers[i]
		bin := filepath.Base(c.Command[0])
		for _, a := range append(slices.Clone(c.Command[1:]), c.Args...) {
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if !flags[bin][name] {
				t.Errorf("%s: container %s passes --%s, which %s does not define", file, c.Name, name, bin)
			}
		}
		if bin == "tokenizerd" {
			tok = c
		}
	}
	if tok == nil {
		t.Fatalf("%s: no tokenizerd container", file)
	}
	for _, p := range []*corev1.Probe{tok.ReadinessProbe, tok.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
			t.Errorf("%s: tokenizerd's readiness and startup probes must GET /health, got %+v", file, p)
		}
	}
	wait := argDuration(t, tok.Args, "--drain-delay") + argDuration(t, tok.Args, "--shutdown-timeout") + 2*time.Second
	if h := tok.Lifecycle; h == nil || h.PreStop == nil || h.PreStop.Sleep == nil {
		t.Errorf("%s: tokenizerd has no preStop sleep", file)
	} else {
		wait += time.Duration(h.PreStop.Sleep.Seconds) * time.Second
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= wait {
		t.Errorf("%s: terminationGracePeriodSeconds %v, want more than preStop + drain delay + shutdown timeout + 2 s = %v", file, g, wait)
	}
}

func argDuration(t *testing.T, args []string, flag string) time.Duration {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("tokenizerd args %v lack %s", args, flag)
	}
	d, err := time.ParseDuration(args[i+1])
	if err != nil {
		t.Fatalf("%s %s: %v", flag, args[i+1], err)
	}
	return d
}

// binaryFlags builds the engine's binaries and reads each one's flags from --help, so a
// manifest cannot pass a flag that does not exist.
func binaryFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	dir := t.TempDir()
	run(t, "../..", "go", "build", "-o", dir+"/", "./cmd/tokenizerd", "./cmd/schedulerd", "./cmd/detokd")
	re := regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)`)
	out := map[string]map[string]bool{}
	for bin, sub := range map[string]string{"tokenizerd": "serve", "schedulerd": "serve", "detokd": ""} {
		args := []string{"--help"}
		if sub != "" {
			args = []string{sub, "--help"}
		}
		help := run(t, ".", filepath.Join(dir, bin), args...)
		out[bin] = map[string]bool{}
		for _, m := range re.FindAllStringSubmatch(help, -1) {
			out[bin][m[1]] = true
		}
		if len(out[bin]) < 5 {
			t.Fatalf("%s --help lists %d flags:\n%s", bin, len(out[bin]), help)
		}
	}
	return out
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b.String())
	}
	return b.String()
}
