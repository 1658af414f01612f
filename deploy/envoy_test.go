package deploy_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // registers the Any type
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/rls"
)

// validatable is what protoc-gen-validate generates on every message.
type validatable interface{ ValidateAll() error }

// decodeProto decodes YAML (or a value already decoded from YAML) into msg
// with protojson, rejecting unknown fields, then runs the message's
// generated validation: the checks Envoy itself applies to its config.
func decodeProto(t *testing.T, where string, value any, msg proto.Message) {
	t.Helper()
	raw, err := json.Marshal(value)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(raw, msg); err != nil {
		t.Fatalf("%s: does not decode as %T: %v", where, msg, err)
	}
	if v, ok := msg.(validatable); ok {
		if err := v.ValidateAll(); err != nil {
			t.Fatalf("%s: invalid %T: %v", where, msg, err)
		}
	}
}

func yamlValue(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := sigsyaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// checkRateLimitFilter checks the filter asks Tollgate's domain over the
// v3 protocol through cluster (when given) and is not left failing open.
func checkRateLimitFilter(t *testing.T, where string, f *ratelimitfilterv3.RateLimit, cluster string) {
	t.Helper()
	def, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if f.Domain != def.GRPCRLSDomain {
		t.Errorf("%s: domain %q, but Tollgate answers %q (GRPC_RLS_DOMAIN's default); another domain is answered OK for everything", where, f.Domain, def.GRPCRLSDomain)
	}
	svc := f.GetRateLimitService()
	if svc.GetTransportApiVersion().String() != "V3" {
		t.Errorf("%s: transport_api_version %v, want V3", where, svc.GetTransportApiVersion())
	}
	if got := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName(); cluster != "" && got != cluster {
		t.Errorf("%s: rate limit service cluster %q, want %q", where, got, cluster)
	}
	if !f.FailureModeDeny {
		t.Errorf("%s: failure_mode_deny false lets every request through while Tollgate cannot be reached", where)
	}
}

// checkRLSCluster checks the cluster speaks HTTP/2 (gRPC) and health-checks
// Tollgate's rate limit service by its name.
func checkRLSCluster(t *testing.T, where string, c *clusterv3.Cluster) {
	t.Helper()
	var opts upstreamhttpv3.HttpProtocolOptions
	anyOpts, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok || anyOpts.UnmarshalTo(&opts) != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("%s: cluster %s does not speak HTTP/2 (gRPC needs explicit_http_config.http2_protocol_options)", where, c.Name)
	}
	found := false
	for _, hc := range c.GetHealthChecks() {
		if hc.GetGrpcHealthCheck().GetServiceName() == rls.ServiceName {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: cluster %s does not health-check %s over grpc.health.v1", where, c.Name, rls.ServiceName)
	}
}

// checkActions checks a rate limit's actions send the tenant as Tollgate
// reads it.
func checkActions(t *testing.T, where string, rl *routev3.RateLimit) {
	t.Helper()
	tenant := false
	for _, a := range rl.GetActions() {
		if rh := a.GetRequestHeaders(); rh != nil && (rh.DescriptorKey == rls.EntryAPIKey || rh.DescriptorKey == rls.EntryTenantID) {
			tenant = true
		}
		if gk := a.GetGenericKey(); gk != nil && gk.DescriptorKey != rls.EntryMeter {
			t.Errorf("%s: generic_key %q is an entry Tollgate does not read", where, gk.DescriptorKey)
		}
	}
	if !tenant {
		t.Errorf("%s: a rate limit whose descriptor names no %s or %s is refused by Tollgate", where, rls.EntryAPIKey, rls.EntryTenantID)
	}
}

func TestEnvoyBootstrapValidates(t *testing.T) {
	var b bootstrapv3.Bootstrap
	decodeProto(t, "envoy/envoy.yaml", yamlValue(t, "envoy/envoy.yaml"), &b)

	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.Name] = c
	}
	var filters, limits, guarded int
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := nf.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatalf("listener %s: %v", l.Name, err)
				}
				for i, hf := range hcm.GetHttpFilters() {
					if hf.Name != "envoy.filters.http.ratelimit" {
						continue
					}
					filters++
					var rl ratelimitfilterv3.RateLimit
					if err := hf.GetTypedConfig().UnmarshalTo(&rl); err != nil {
						t.Fatal(err)
					}
					cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
					checkRateLimitFilter(t, "envoy.yaml", &rl, cluster)
					if c := clusters[cluster]; c == nil {
						t.Errorf("the rate limit filter names cluster %q, which is not defined", cluster)
					} else {
						checkRLSCluster(t, "envoy.yaml", c)
					}
					if last := hcm.GetHttpFilters()[len(hcm.GetHttpFilters())-1]; i == len(hcm.GetHttpFilters())-1 || last.Name != "envoy.filters.http.router" {
						t.Error("the rate limit filter must come before the router, which must be last")
					}
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						if r.GetDirectResponse().GetStatus() == 401 {
							guarded++
						}
						for _, rl := range r.GetRoute().GetRateLimits() {
							checkActions(t, "envoy.yaml route "+r.GetMatch().GetPrefix(), rl)
							limits++
						}
						if ra := r.GetRoute(); ra != nil {
							if clusters[ra.GetCluster()] == nil {
								t.Errorf("route %s sends to cluster %q, which is not defined", r.GetMatch().GetPrefix(), ra.GetCluster())
							}
						}
					}
				}
			}
		}
	}
	if filters != 1 || limits < 2 || guarded != 1 {
		t.Fatalf("%d rate limit filters, %d route rate limits, %d routes refusing a request without a key: want 1, at least 2, 1", filters, limits, guarded)
	}
}

func TestIstioEnvoyFilterValidates(t *testing.T) {
	doc := yamlValue(t, "envoy/istio-envoyfilter.yaml")
	if doc["apiVersion"] != "networking.istio.io/v1alpha3" || doc["kind"] != "EnvoyFilter" {
		t.Fatalf("not an EnvoyFilter: %v %v", doc["apiVersion"], doc["kind"])
	}
	spec, _ := doc["spec"].(map[string]any)
	patches, _ := spec["configPatches"].([]any)
	seen := map[string]bool{}
	for i, p := range patches {
		p := p.(map[string]any)
		applyTo, _ := p["applyTo"].(string)
		value := p["patch"].(map[string]any)["value"]
		where := "istio-envoyfilter.yaml patch " + applyTo
		switch applyTo {
		case "HTTP_FILTER":
			var hf hcmv3.HttpFilter
			decodeProto(t, where, value, &hf)
			var rl ratelimitfilterv3.RateLimit
			if err := hf.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			checkRateLimitFilter(t, where, &rl, "")
		case "VIRTUAL_HOST":
			var vh routev3.VirtualHost
			decodeProto(t, where, merged(value, map[string]any{"name": "patched", "domains": []any{"*"}}), &vh)
			for _, rl := range vh.GetRateLimits() {
				checkActions(t, where, rl)
			}
			if len(vh.GetRateLimits()) == 0 {
				t.Errorf("%s: no rate_limits", where)
			}
		default:
			t.Errorf("patch %d: applyTo %q is not one this test knows", i, applyTo)
		}
		seen[applyTo] = true
	}
	if !seen["HTTP_FILTER"] || !seen["VIRTUAL_HOST"] {
		t.Fatalf("patches %v: want the filter and the routes' rate limits", seen)
	}
}

func TestEnvoyGatewayPatchValidates(t *testing.T) {
	doc := yamlValue(t, "envoy/envoy-gateway-patch.yaml")
	if doc["apiVersion"] != "gateway.envoyproxy.io/v1alpha1" || doc["kind"] != "EnvoyPatchPolicy" {
		t.Fatalf("not an EnvoyPatchPolicy: %v %v", doc["apiVersion"], doc["kind"])
	}
	spec, _ := doc["spec"].(map[string]any)
	if spec["type"] != "JSONPatch" {
		t.Fatalf("type %v, want JSONPatch", spec["type"])
	}
	var rlsCluster string
	var clusters []string
	for _, p := range spec["jsonPatches"].([]any) {
		p := p.(map[string]any)
		typ, _ := p["type"].(string)
		op := p["operation"].(map[string]any)
		path, _ := op["path"].(string)
		where := "envoy-gateway-patch.yaml " + typ + " " + path
		switch {
		case strings.HasSuffix(typ, "Listener") && strings.Contains(path, "/http_filters/"):
			var hf hcmv3.HttpFilter
			decodeProto(t, where, op["value"], &hf)
			var rl ratelimitfilterv3.RateLimit
			if err := hf.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			checkRateLimitFilter(t, where, &rl, "")
			rlsCluster = rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
		case strings.HasSuffix(typ, "Cluster") && path == "":
			var c clusterv3.Cluster
			decodeProto(t, where, op["value"], &c)
			checkRLSCluster(t, where, &c)
			clusters = append(clusters, c.Name)
		case strings.HasSuffix(typ, "RouteConfiguration") && strings.HasSuffix(path, "/rate_limits"):
			list, _ := op["value"].([]any)
			if len(list) == 0 {
				t.Errorf("%s: no rate limits", where)
			}
			for _, v := range list {
				var rl routev3.RateLimit
				decodeProto(t, where, v, &rl)
				checkActions(t, where, &rl)
			}
		default:
			t.Errorf("patch %s %s is not one this test knows", typ, path)
		}
	}
	if rlsCluster == "" || !slices.Contains(clusters, rlsCluster) {
		t.Fatalf("the filter asks cluster %q; the patch adds %v", rlsCluster, clusters)
	}
}

func merged(v any, extra map[string]any) map[string]any {
	out := map[string]any{}
	for k, x := range extra {
		out[k] = x
	}
	for k, x := range v.(map[string]any) {
		out[k] = x
	}
	return out
}
