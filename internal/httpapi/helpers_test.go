package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// testAdminToken is the admin token of servers started by newTestAPI.
const testAdminToken = "tga_test_admin_token_0123456789"

// testAPI is one real api instance on httptest: the package's database, the
// shared Redis under a prefix, the entitlements service, the credentials
// service with its revocation subscription running, and every log line
// captured.
type testAPI struct {
	URL    string
	Pool   *pgxpool.Pool
	RDB    *redis.Client
	Prefix string
	Ents   *entitlements.Service
	Keys   *credentials.Service
	Store  *limitstore.Store
	Srv    *Server
	Logs   *logBuffer
}

// testAPIOptions tune newTestAPI; the zero value is fine.
type testAPIOptions struct {
	// Prefix shares Redis state with another instance; "" makes a new one.
	Prefix string
	// Deps is called on the Deps before NewServer, to add other areas' services.
	Deps func(*Deps)
}

// newTestAPI starts an instance. Two instances given the same Prefix behave
// like two api processes of one deployment.
func newTestAPI(t *testing.T, opt testAPIOptions) *testAPI {
	t.Helper()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	if opt.Prefix != "" {
		prefix = opt.Prefix
	}
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(pool, store, log, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	keys := credentials.New(pool, ents, log, credentials.Options{Redis: rdb, Prefix: prefix})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = keys.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Metering answers GET /v1/usage and the admin API's usage; a test may
	// replace it through opt.Deps.
	meter := metering.NewService(pool, store, log, metering.Options{Snapshot: ents.CachedSnapshot})
	d := Deps{Log: log, DB: pool, Redis: rdb, AdminToken: testAdminToken, Entitlements: ents, Catalogue: cat, Credentials: keys, Metering: meter}
	if opt.Deps != nil {
		opt.Deps(&d)
	}
	srv, err := NewServer(d)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	a := &testAPI{URL: ts.URL, Pool: pool, RDB: rdb, Prefix: prefix, Ents: ents, Keys: keys, Store: store, Srv: srv, Logs: logs}
	testkit.Eventually(t, 5*time.Second, "API key revocation subscription", keys.KeyCacheLive)
	return a
}

// logBuffer collects log output safely from many goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// apiResp is a response with its body read.
type apiResp struct {
	Status int
	Header http.Header
	Raw    []byte
	JSON   map[string]any // nil unless the body is a JSON object
}

// Decode decodes the body into v.
func (r apiResp) Decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Raw, v); err != nil {
		t.Fatalf("decode %s: %v", r.Raw, err)
	}
}

// FieldErrors lists the "field" of each entry of a problem's errors.
func (r apiResp) FieldErrors() []string {
	var out []string
	errs, _ := r.JSON["errors"].([]any)
	for _, e := range errs {
		if m, ok := e.(map[string]any); ok {
			f, _ := m["field"].(string)
			out = append(out, f)
		}
	}
	return out
}

// do sends one request. body may be nil, a string or []byte (sent as is),
// or any other value (sent as JSON). token "" sends no Authorization.
func (a *testAPI) do(t *testing.T, method, path, token string, body any) apiResp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, a.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := apiResp{Status: res.StatusCode, Header: res.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.JSON)
	return r
}

// admin sends a request with the admin token and fails the test unless the
// status is want (0 = any).
func (a *testAPI) admin(t *testing.T, method, path string, body any, want int) apiResp {
	t.Helper()
	r := a.do(t, method, path, testAdminToken, body)
	if want != 0 && r.Status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.Status, want, r.Raw)
	}
	return r
}

// createPlan creates a plan with a unique key from body (key filled in).
func (a *testAPI) createPlan(t *testing.T, body map[string]any) string {
	t.Helper()
	key, _ := body["key"].(string)
	if key == "" {
		key = uniqueName("plan")
		body["key"] = key
	}
	a.admin(t, http.MethodPost, "/admin/v1/plans", body, http.StatusCreated)
	return key
}

// createTenant creates a tenant on plan and returns its id.
func (a *testAPI) createTenant(t *testing.T, plan string) string {
	t.Helper()
	r := a.admin(t, http.MethodPost, "/admin/v1/tenants", map[string]any{"name": uniqueName("Tenant"), "plan": plan}, http.StatusCreated)
	id, _ := r.JSON["id"].(string)
	if id == "" {
		t.Fatalf("no id in %s", r.Raw)
	}
	return id
}

// issueKey issues an API key for the tenant and returns the raw key and its id.
func (a *testAPI) issueKey(t *testing.T, tenantID string) (key, id string) {
	t.Helper()
	r := a.admin(t, http.MethodPost, "/admin/v1/tenants/"+tenantID+"/api-keys", nil, http.StatusCreated)
	key, _ = r.JSON["key"].(string)
	id, _ = r.JSON["id"].(string)
	if key == "" || id == "" {
		t.Fatalf("issue key: %s", r.Raw)
	}
	return key, id
}

// uniqueName makes a name no other test uses.
func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// assertProblem checks a problem+json answer of the given status.
func assertProblem(t *testing.T, what string, r apiResp, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.Status, status, r.Raw)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if r.JSON["type"] == nil || r.JSON["title"] == nil || r.JSON["status"] != float64(status) {
		t.Fatalf("%s: not a problem body: %s", what, r.Raw)
	}
	if status == http.StatusUnauthorized && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("%s: 401 without WWW-Authenticate: Bearer", what)
	}
}
