package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// readmeExamples returns the README's "One example per area" block: its
// first line (the variables every example uses) and each command, with
// backslash continuations joined, in the README's order.
func readmeExamples(t *testing.T) (prelude string, cmds []string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "One example per area.")
	if i < 0 {
		t.Fatal(`docs/api.md: no "One example per area." section`)
	}
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(s[i:])
	if m == nil {
		t.Fatal("docs/api.md: no sh block after \"One example per area.\"")
	}
	var cur string
	for _, line := range strings.Split(m[1], "\n") {
		if cur == "" && (strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		cur += line + "\n"
		if strings.HasSuffix(line, "\\") || strings.Count(cur, "'")%2 == 1 {
			continue // continued, or inside a quoted body spanning lines
		}
		if prelude == "" {
			prelude = cur
		} else {
			cmds = append(cmds, cur)
		}
		cur = ""
	}
	return prelude, cmds
}

// exchange is one request through the validating proxy.
type exchange struct {
	method, path string
	status       int
	body         []byte
}

// TestREADMEExamplesRunAndMatchTheSpec runs the README's examples as
// written, in the README's order, against a real api (its own database),
// with the values `make run` prints (ADMIN_TOKEN, API_KEY, T) and the lease
// id the concurrency check answers (L). Every request and every answer goes
// through a proxy that validates both against api/openapi.yaml (kin-openapi,
// JSON Schema 2020-12 as in OpenAPI 3.1): a curl without Content-Type, a
// field the spec does not know, or an answer the spec does not describe
// fails here.
func TestREADMEExamplesRunAndMatchTheSpec(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the README's curl examples against a real api")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Unavailable(t, tool, err)
		}
	}
	prelude, cmds := readmeExamples(t)
	if !strings.Contains(prelude, `A="Authorization: Bearer $ADMIN_TOKEN"`) || len(cmds) < 15 {
		t.Fatalf("README examples: prelude %q, %d commands", prelude, len(cmds))
	}

	rdb, _ := redistest.New(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		testkit.Unavailable(t, "postgres", err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	dbName := "tollgate_readme_" + hex.EncodeToString(suffix[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)")
	})
	e := serveEnv(t)
	e["DATABASE_URL"] = withDatabase(pgtest.BaseURL(), dbName)

	// seed-demo, as make run does, gives the values make run prints.
	var seedOut, seedErr testkit.Buffer
	if code := run(ctx, []string{"seed-demo"}, testkit.Getenv(e), &seedOut, &seedErr); code != exitOK {
		t.Fatalf("seed-demo: %d %s", code, seedErr.String())
	}
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `: (\S+)$`).FindStringSubmatch(seedOut.String())
		if m == nil {
			t.Fatalf("seed-demo printed no %s:\n%s", name, seedOut.String())
		}
		return m[1]
	}
	tenant, apiKey := field("tenant_id"), field("api_key")
	var cleanMu sync.Mutex
	tenants := []string{tenant}
	t.Cleanup(func() {
		cleanMu.Lock()
		defer cleanMu.Unlock()
		for _, id := range tenants {
			redistest.Clean(context.Background(), rdb, "tg:{t:"+id+"}")
		}
	})

	srvCtx, stop := context.WithCancel(ctx)
	var stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(srvCtx, []string{"serve"}, testkit.Getenv(e), io.Discard, &stderr) }()
	t.Cleanup(func() { stop(); waitExit(t, exited, stderr.String) })
	addr := listeningAddr(t, stderr.String, exited)

	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatalf("load the spec: %v", err)
	}
	doc.Servers = nil // the proxy's address, not make run's
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	opts := &openapi3filter.Options{
		AuthenticationFunc:      openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus:   true,
		MultiError:              true,
		SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()},
	}
	var (
		mu        sync.Mutex
		exchanges []exchange
	)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, _ := io.ReadAll(r.Body)
		x := exchange{method: r.Method, path: r.URL.RequestURI()}
		vr := r.Clone(r.Context())
		vr.Body = io.NopCloser(bytes.NewReader(reqBody))
		route, params, err := router.FindRoute(vr)
		if err != nil {
			t.Errorf("%s %s: not in the spec: %v", r.Method, r.URL.Path, err)
			http.Error(w, "not in the spec", http.StatusTeapot)
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			t.Errorf("%s %s: the request does not match the spec: %v", r.Method, r.URL.Path, err)
		}
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+addr+r.URL.RequestURI(), bytes.NewReader(reqBody))
		out.Header = r.Header.Clone()
		res, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		resBody, _ := io.ReadAll(res.Body)
		x.status, x.body = res.StatusCode, resBody
		vin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header, Options: opts}
		vin.SetBodyBytes(resBody)
		if err := openapi3filter.ValidateResponse(r.Context(), vin); err != nil {
			t.Errorf("%s %s: the %d answer does not match the spec: %v\n%s", r.Method, r.URL.Path, res.StatusCode, err, resBody)
		}
		mu.Lock()
		exchanges = append(exchanges, x)
		mu.Unlock()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(resBody)
	}))
	t.Cleanup(proxy.Close)

	lease := ""
	for _, c := range cmds {
		if strings.HasPrefix(c, "stripe ") {
			continue // the Stripe CLI, outside Tollgate
		}
		if !strings.HasPrefix(c, "curl ") {
			t.Fatalf("README example is not a curl command: %q", c)
		}
		mu.Lock()
		before := len(exchanges)
		mu.Unlock()
		script := prelude + strings.ReplaceAll(c, "http://127.0.0.1:8080", proxy.URL)
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Env = append(os.Environ(), "ADMIN_TOKEN="+e["ADMIN_TOKEN"], "API_KEY="+apiKey, "T="+tenant, "L="+lease)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README example failed (%v):\n%s\n%s", err, c, out)
		}
		mu.Lock()
		got := exchanges[before:]
		mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("README example made %d requests, want 1:\n%s", len(got), c)
		}
		x := got[0]
		want2xx := !strings.Contains(c, "/stripe/events/evt_123/replay") // a stand-in id: 404
		if (want2xx && x.status/100 != 2) || (!want2xx && x.status != http.StatusNotFound) {
			t.Fatalf("README example answered %d:\n%s\n%s", x.status, c, x.body)
		}
		var body map[string]any
		_ = json.Unmarshal(x.body, &body)
		if l, ok := body["lease"].(map[string]any); ok {
			lease, _ = l["id"].(string)
		}
		if x.method == http.MethodPost && x.path == "/admin/v1/tenants" {
			if id, _ := body["id"].(string); id != "" {
				cleanMu.Lock()
				tenants = append(tenants, id)
				cleanMu.Unlock()
			}
		}
	}
	if lease == "" {
		t.Fatal("no example answered a lease for $L")
	}
}
