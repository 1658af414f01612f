package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tollgatehq/tollgate/internal/config"
)

// TestPrometheusRules runs promtool over the shipped rules: the syntax check,
// then the unit tests of every alert in tollgate.rules.test.yml.
func TestPrometheusRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is missing (Debian's prometheus package has it; .ci/run installs it)")
		}
		t.Skip("promtool is missing: apt-get install prometheus")
	}
	for _, args := range [][]string{
		{"check", "rules", "tollgate.rules.yml"},
		{"test", "rules", "tollgate.rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEveryAlertHasAUnitTest keeps tollgate.rules.test.yml in step with the
// rules: an alert added without a test of it fails here.
func TestEveryAlertHasAUnitTest(t *testing.T) {
	var tests struct {
		Tests []struct {
			Alerts []struct {
				Name string `yaml:"alertname"`
				Exp  []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "prometheus/tollgate.rules.test.yml", &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.Alerts {
			if len(a.Exp) > 0 {
				fires[a.Name] = true
			}
		}
	}
	for _, r := range rules(t) {
		if r.Alert != "" && !fires[r.Alert] {
			t.Errorf("alert %s has no unit test in which it fires", r.Alert)
		}
	}
}

// TestRulesAndDashboardNameMetricsThatExist checks every metric the alert
// rules and the Grafana dashboard query against the metrics the api and the
// worker define, so a renamed metric cannot leave a panel blank or an alert
// that never fires.
func TestRulesAndDashboardNameMetricsThatExist(t *testing.T) {
	defined := definedMetrics(t)
	if len(defined) < 10 {
		t.Fatalf("found only %d metric definitions in the source: the scan is broken", len(defined))
	}
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, expr)
		}
		for _, n := range names {
			if !defined.has(n) {
				t.Errorf("%s: %q names %s, which neither api nor worker defines", where, expr, n)
			}
		}
	}
	for _, r := range rules(t) {
		check("rule "+r.Alert, r.Expr)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	raw, err := os.ReadFile("grafana/tollgate.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("grafana/tollgate.json: %v", err)
	}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			check("panel "+p.Title, q.Expr)
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			check("variable "+v.Name, v.Definition)
		}
	}
	if queries < 20 {
		t.Errorf("the dashboard has %d queries; it should cover the api and the worker", queries)
	}
}

func TestMetricNamesOfAnExpression(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le, route) (rate(tollgate_http_request_duration_seconds_bucket{job=~"$api_job",status=~"5.."}[$__rate_interval]))) / on() up + label_values(tollgate_limiter_decisions_total{job="a"}, instance)`)
	want := []string{"tollgate_http_request_duration_seconds_bucket", "up", "tollgate_limiter_decisions_total"}
	if !slices.Equal(got, want) {
		t.Fatalf("metricNames = %v, want %v", got, want)
	}
	d := metricSet{"tollgate_x_seconds": "histogram"}
	if !d.has("tollgate_x_seconds_bucket") || d.has("tollgate_y_total") || (metricSet{"tollgate_c_total": "counter"}).has("tollgate_c_total_bucket") {
		t.Fatal("metricSet.has: a histogram's series or a missing metric judged wrong")
	}
}

type rule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

func rules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "prometheus/tollgate.rules.yml", &f)
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("no rules read")
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// metricSet maps a defined metric's name to its kind (counter, gauge,
// histogram, summary or desc for a collector's own).
type metricSet map[string]string

func (m metricSet) has(series string) bool {
	if _, ok := m[series]; ok {
		return true
	}
	if strings.HasPrefix(series, "go_") || strings.HasPrefix(series, "process_") || series == "up" {
		return true // the Go and process collectors, and Prometheus's own
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			kind := m[base]
			return kind == "histogram" || (kind == "summary" && suffix != "_bucket")
		}
	}
	return false
}

var (
	promIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// What PromQL spells like a name but is not a metric.
	promWords = map[string]bool{"sum": true, "by": true, "rate": true, "increase": true, "max": true, "min": true,
		"avg": true, "histogram_quantile": true, "le": true, "on": true, "without": true, "and": true, "or": true,
		"unless": true, "count": true, "label_values": true, "bool": true, "ignoring": true, "group_left": true,
		"group_right": true, "topk": true, "irate": true, "delta": true, "abs": true, "clamp_min": true}
)

// metricNames returns the metric names an expression selects, leaving out
// label matchers, label lists, strings, ranges and functions.
func metricNames(expr string) []string {
	// Strings, label matchers and ranges first, then grouping lists and the
	// label of Grafana's label_values(metric, label).
	expr = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).ReplaceAllString(expr, `""`)
	expr = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(expr, " ")
	expr = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(expr, " ")
	expr = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(expr, " ")
	expr = regexp.MustCompile(`\blabel_values\(([^,]*),\s*[a-zA-Z_]+\s*\)`).ReplaceAllString(expr, "$1")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(expr, -1) {
		w := expr[loc[0]:loc[1]]
		rest := strings.TrimLeft(expr[loc[1]:], " \t\n")
		if promWords[w] || strings.HasPrefix(rest, "(") {
			continue
		}
		if loc[0] > 0 && strings.ContainsAny(expr[loc[0]-1:loc[0]], "0123456789.$") {
			continue // part of a number (1e3) or a variable
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// definedMetrics finds the metrics the product's code defines: the Name of a
// prometheus.*Opts literal and the name given to prometheus.NewDesc, in the
// non-test Go files of cmd/ and internal/.
func definedMetrics(t *testing.T) metricSet {
	t.Helper()
	out := metricSet{}
	fset := token.NewFileSet()
	for _, root := range []string{"../cmd", "../internal"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					sel, ok := n.Type.(*ast.SelectorExpr)
					if !ok || !isPkg(sel.X, "prometheus") || !strings.HasSuffix(sel.Sel.Name, "Opts") {
						return true
					}
					kind := strings.ToLower(strings.TrimSuffix(sel.Sel.Name, "Opts"))
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Name") {
							if name, ok := stringLit(kv.Value); ok {
								out[name] = kind
							}
						}
					}
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					if ok && isPkg(sel.X, "prometheus") && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
						if name, ok := stringLit(n.Args[0]); ok {
							out[name] = "desc"
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func isPkg(e ast.Expr, name string) bool   { return isIdent(e, name) }
func isIdent(e ast.Expr, name string) bool { id, ok := e.(*ast.Ident); return ok && id.Name == name }

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// manifests are the Kubernetes objects of deploy/kubernetes, decoded strictly
// into the API's own types: a misspelt or misplaced field is an error, as
// `kubectl apply --validate=strict` would make it.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	jobs        map[string]*batchv1.Job
}

func loadManifests(t *testing.T) (manifests, []string) {
	t.Helper()
	m := manifests{deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, jobs: map[string]*batchv1.Job{}}
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var names []string
	for _, path := range files {
		names = append(names, filepath.Base(path))
		if filepath.Base(path) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			if err := m.add([]byte(doc)); err != nil {
				t.Errorf("%s document %d: %v", path, i+1, err)
			}
		}
	}
	return m, names
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

func (m manifests) add(doc []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := sigsyaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	if head.Metadata.Name == "" {
		return errors.New("no metadata.name")
	}
	strict := func(want string, v any) error {
		if head.APIVersion != want {
			return fmt.Errorf("%s %s: apiVersion %q, want %q", head.Kind, head.Metadata.Name, head.APIVersion, want)
		}
		return sigsyaml.UnmarshalStrict(doc, v)
	}
	switch head.Kind {
	case "Deployment":
		var d appsv1.Deployment
		m.deployments[head.Metadata.Name] = &d
		return strict("apps/v1", &d)
	case "Service":
		var s corev1.Service
		m.services[head.Metadata.Name] = &s
		return strict("v1", &s)
	case "PodDisruptionBudget":
		var p policyv1.PodDisruptionBudget
		m.pdbs[head.Metadata.Name] = &p
		return strict("policy/v1", &p)
	case "ConfigMap":
		var c corev1.ConfigMap
		m.configMaps[head.Metadata.Name] = &c
		return strict("v1", &c)
	case "Secret":
		var s corev1.Secret
		m.secrets[head.Metadata.Name] = &s
		return strict("v1", &s)
	case "Job":
		var j batchv1.Job
		m.jobs[head.Metadata.Name] = &j
		return strict("batch/v1", &j)
	}
	return fmt.Errorf("kind %q is not one this test knows: add it here", head.Kind)
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	m, files := loadManifests(t)
	for _, name := range []string{"tollgate-api", "tollgate-worker"} {
		if m.deployments[name] == nil {
			t.Errorf("no Deployment %s", name)
		}
		if m.pdbs[name] == nil {
			t.Errorf("no PodDisruptionBudget for %s", name)
		}
	}
	if m.jobs["tollgate-migrate"] == nil {
		t.Error("no migration Job")
	}

	// Every manifest but the example Secret is in the kustomization, and
	// every file it names exists.
	var kust struct {
		Resources []string `json:"resources"`
	}
	raw, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(raw, &kust); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f != "kustomization.yaml" && f != "secret.example.yaml" && !slices.Contains(kust.Resources, f) {
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
	}
	for _, r := range kust.Resources {
		if !slices.Contains(files, r) {
			t.Errorf("kustomization.yaml names %s, which does not exist", r)
		}
	}
}

func TestKubernetesManifestsFitTogether(t *testing.T) {
	m, _ := loadManifests(t)
	cfg := m.configMaps["tollgate-config"]
	if cfg == nil {
		t.Fatal("no ConfigMap tollgate-config")
	}
	shutdown, err := time.ParseDuration(cfg.Data["SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("SHUTDOWN_TIMEOUT: %v", err)
	}

	pods := map[string]corev1.PodTemplateSpec{}
	for name, d := range m.deployments {
		pods[name] = d.Spec.Template
		if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("Deployment %s: its selector does not select its own pods", name)
		}
		if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown {
			t.Errorf("Deployment %s: terminationGracePeriodSeconds must exceed SHUTDOWN_TIMEOUT (%s), or a drain is cut by SIGKILL", name, shutdown)
		}
	}
	for name, j := range m.jobs {
		pods[name] = j.Spec.Template
	}
	for name, pod := range pods {
		checkPod(t, name, pod, m)
	}

	api := m.deployments["tollgate-api"]
	if api != nil {
		c := api.Spec.Template.Spec.Containers[0]
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Error("api: readiness must probe /readyz (a pod that cannot reach Postgres or Redis takes no traffic)")
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Error("api: liveness must probe /healthz (a Redis outage must not restart every pod)")
		}
		if n, _ := strconv.Atoi(cfg.Data["EXPECTED_INSTANCES"]); api.Spec.Replicas == nil || int32(n) != *api.Spec.Replicas {
			t.Errorf("EXPECTED_INSTANCES is %q but the api runs %v replicas: the local fail mode's shares would not add up", cfg.Data["EXPECTED_INSTANCES"], api.Spec.Replicas)
		}
	}
	if w := m.deployments["tollgate-worker"]; w != nil {
		c := w.Spec.Template.Spec.Containers[0]
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Error("worker: liveness must probe /healthz on its metrics port")
		}
	}

	for name, s := range m.services {
		pod, ok := selected(s.Spec.Selector, pods)
		if !ok {
			t.Errorf("Service %s selects no pods", name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.StrVal != "" && !hasPort(pod, p.TargetPort.StrVal) {
				t.Errorf("Service %s: targetPort %q is no container port of the pods it selects", name, p.TargetPort.StrVal)
			}
		}
	}
	for name, p := range m.pdbs {
		if p.Spec.Selector == nil {
			t.Errorf("PodDisruptionBudget %s has no selector", name)
			continue
		}
		if _, ok := selected(p.Spec.Selector.MatchLabels, pods); !ok {
			t.Errorf("PodDisruptionBudget %s selects no pods", name)
		}
		if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
			t.Errorf("PodDisruptionBudget %s limits nothing", name)
		}
	}
}

// checkPod checks one pod template: its probes use ports it has, its
// environment comes from objects that exist, and it runs as a numeric
// non-root user (the image's USER is the name nonroot, which the kubelet
// cannot check runAsNonRoot against).
func checkPod(t *testing.T, name string, pod corev1.PodTemplateSpec, m manifests) {
	t.Helper()
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("%s: runAsNonRoot with a numeric runAsUser is required", name)
	}
	if len(pod.Spec.Containers) == 0 {
		t.Errorf("%s: no containers", name)
		return
	}
	for _, c := range pod.Spec.Containers {
		for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if probe != nil && probe.HTTPGet != nil && probe.HTTPGet.Port.StrVal != "" && !hasPort(pod, probe.HTTPGet.Port.StrVal) {
				t.Errorf("%s: a probe uses port %q, which the container does not declare", name, probe.HTTPGet.Port.StrVal)
			}
		}
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef != nil && m.configMaps[from.ConfigMapRef.Name] == nil {
				t.Errorf("%s: envFrom names ConfigMap %s, which is not shipped", name, from.ConfigMapRef.Name)
			}
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: a container without a CPU request or a memory limit", name)
		}
	}
}

// TestKubernetesConfigIsWhatTollgateReads loads the ConfigMap and the example
// Secret through internal/config, the same code api and worker start with:
// every key must be a variable Tollgate reads, and the values must validate.
func TestKubernetesConfigIsWhatTollgateReads(t *testing.T) {
	m, _ := loadManifests(t)
	env := map[string]string{}
	for _, c := range m.configMaps {
		for k, v := range c.Data {
			env[k] = v
		}
	}
	for _, s := range m.secrets {
		for k, v := range s.StringData {
			env[k] = v
		}
	}
	read := map[string]bool{}
	if _, err := config.Load(func(k string) string { read[k] = true; return env[k] }); err != nil {
		t.Fatalf("the manifests' configuration does not load: %v", err)
	}
	for k := range env {
		if !read[k] {
			t.Errorf("%s is set by the manifests but Tollgate reads no such variable", k)
		}
	}
	for _, want := range []string{"DATABASE_URL", "REDIS_URL", "ADMIN_TOKEN"} {
		if _, ok := env[want]; !ok {
			t.Errorf("%s is not provided to the pods", want)
		}
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func selected(selector map[string]string, pods map[string]corev1.PodTemplateSpec) (corev1.PodTemplateSpec, bool) {
	for _, p := range pods {
		if selects(selector, p.Labels) {
			return p, true
		}
	}
	return corev1.PodTemplateSpec{}, false
}

func hasPort(pod corev1.PodTemplateSpec, name string) bool {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}
