package main

// Docker cannot run where the tests run, so these tests check what can be
// checked without it: docker-compose.yml parses, has every service with a
// health check and health-gated dependencies, and hands api and worker a
// configuration that config.Load accepts; the Dockerfile has the targets
// compose builds and runs as a non-root user.

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgatehq/tollgate/internal/config"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeBuild struct {
	Context string `yaml:"context"`
	Target  string `yaml:"target"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatalf("read docker-compose.yml: %v", err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return f
}

// interpolate resolves compose's ${VAR:-default} to the default, as compose
// does with an empty environment.
var interpolation = regexp.MustCompile(`\$\{([A-Z_]+)(:-([^}]*))?\}`)

func interpolate(s string) string {
	return interpolation.ReplaceAllString(s, "$3")
}

func TestComposeHasEveryServiceHealthChecked(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	want := []string{"postgres", "redis", "stripe-mock", "api", "worker"}
	if len(f.Services) != len(want) {
		t.Errorf("services: got %d, want %v", len(f.Services), want)
	}
	for _, name := range want {
		svc, ok := f.Services[name]
		if !ok {
			t.Errorf("service %s missing", name)
			continue
		}
		if svc.Healthcheck == nil || len(svc.Healthcheck.Test) < 2 || (svc.Healthcheck.Test[0] != "CMD" && svc.Healthcheck.Test[0] != "CMD-SHELL") {
			t.Errorf("service %s: no usable healthcheck", name)
		}
		for dep, d := range svc.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("service %s depends on unknown service %s", name, dep)
			}
			if d.Condition != "service_healthy" {
				t.Errorf("service %s: depends_on %s has condition %q, want service_healthy", name, dep, d.Condition)
			}
		}
	}
	if img := f.Services["postgres"].Image; !strings.HasPrefix(img, "postgres:16") {
		t.Errorf("postgres image %q, want postgres:16…", img)
	}
	if img := f.Services["redis"].Image; !strings.HasPrefix(img, "redis:7") {
		t.Errorf("redis image %q, want redis:7…", img)
	}
	for _, name := range []string{"api", "worker"} {
		for _, dep := range []string{"postgres", "redis"} {
			if _, ok := f.Services[name].DependsOn[dep]; !ok {
				t.Errorf("service %s does not wait for %s", name, dep)
			}
		}
	}
	if _, ok := f.Services["worker"].DependsOn["api"]; !ok {
		t.Error("worker starts with MIGRATE_ON_START=false, so it must wait for the api (which migrates)")
	}
}

func TestComposeStripeMockIsPinned(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	sm := f.Services["stripe-mock"]
	switch {
	case sm.Image == "stripe/stripe-mock:v0.189.0":
	case sm.Build != nil && sm.Build.Target == "stripe-mock":
		// Built from the tool pin in go.mod.
		b, err := os.ReadFile("../../go.mod")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "github.com/stripe/stripe-mock v0.189.0") {
			t.Error("go.mod does not pin github.com/stripe/stripe-mock v0.189.0")
		}
	default:
		t.Errorf("stripe-mock is neither the v0.189.0 image nor built from go.mod's pin: %+v", sm)
	}
}

func TestComposeAppConfigurationLoads(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	for _, name := range []string{"api", "worker"} {
		svc := f.Services[name]
		getenv := func(k string) string { return interpolate(svc.Environment[k]) }
		cfg, err := config.Load(getenv)
		if err != nil {
			t.Errorf("service %s: its environment does not load: %v", name, err)
			continue
		}
		if !strings.Contains(cfg.DatabaseURL, "@postgres:") || !strings.Contains(cfg.RedisURL, "//redis:") {
			t.Errorf("service %s does not reach the compose postgres and redis: %s %s", name, cfg.DatabaseURL, cfg.RedisURL)
		}
	}
	if addr := interpolate(f.Services["api"].Environment["HTTP_ADDR"]); !strings.HasPrefix(addr, "0.0.0.0:") {
		t.Errorf("api HTTP_ADDR %q: inside a container it must listen on every interface", addr)
	}
	if got := interpolate(f.Services["worker"].Environment["MIGRATE_ON_START"]); got != "false" {
		t.Errorf("worker MIGRATE_ON_START = %q, want false (the api migrates)", got)
	}
	var check []string
	if hc := f.Services["worker"].Healthcheck; hc != nil {
		check = hc.Test
	}
	if got := interpolate(f.Services["worker"].Environment["WORKER_METRICS_ADDR"]); !strings.HasSuffix(got, ":9091") || !strings.Contains(strings.Join(check, " "), ":9091/healthz") {
		t.Errorf("worker: metrics on %q, health check %v: the check must probe the worker's metrics listener (/healthz, open with METRICS_TOKEN too)", got, check)
	}
	if ep := f.Services["worker"].Entrypoint; len(ep) == 0 || !strings.HasSuffix(ep[0], "/worker") {
		t.Errorf("worker entrypoint %v does not run the worker binary", ep)
	}
}

func TestDockerfileHasTheTargetsComposeBuilds(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatalf("read Dockerfile: %v", err)
	}
	dockerfile := string(b)
	stages := map[string]string{} // target → its instructions
	var current string
	for _, line := range strings.Split(dockerfile, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 4 && strings.EqualFold(fields[0], "FROM") && strings.EqualFold(fields[2], "AS") {
			current = fields[3]
		}
		if current != "" {
			stages[current] += line + "\n"
		}
	}
	for name, svc := range readCompose(t).Services {
		if svc.Build == nil {
			continue
		}
		stage, ok := stages[svc.Build.Target]
		if !ok {
			t.Errorf("service %s builds target %q, which the Dockerfile does not have", name, svc.Build.Target)
			continue
		}
		if !regexp.MustCompile(`(?m)^USER nonroot`).MatchString(stage) {
			t.Errorf("target %s does not run as the non-root user", svc.Build.Target)
		}
		if !strings.Contains(stage, "/usr/local/bin/wget") {
			t.Errorf("target %s has no wget for its health check", svc.Build.Target)
		}
	}
	if !strings.Contains(dockerfile, "CGO_ENABLED=0") {
		t.Error("binaries are not built static (CGO_ENABLED=0)")
	}
}
