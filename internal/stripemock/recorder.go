package stripemock

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// Recorder stands in front of stripe-mock and keeps every POST it passes
// on, so that a test can assert the exact parameters a call sent (stripe-mock
// checks their shape against Stripe's spec but echoes only some of them).
// Refuse makes it answer one path with a Stripe error instead, as Stripe
// does for what stripe-mock cannot know (a price that does not exist).
type Recorder struct {
	URL string

	mu      sync.Mutex
	posts   []Post
	refused map[string]string // path → Stripe's error message
}

// Post is one POST that reached the recorder.
type Post struct {
	Path           string
	Form           url.Values
	IdempotencyKey string
}

// NewRecorder starts a recorder in front of the stripe-mock at base
// (Start's URL); it stops with the test.
func NewRecorder(t testing.TB, base string) *Recorder {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatalf("stripemock: recorder target %q: %v", base, err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	r := &Recorder{refused: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			form, _ := url.ParseQuery(string(body))
			r.mu.Lock()
			r.posts = append(r.posts, Post{Path: req.URL.Path, Form: form, IdempotencyKey: req.Header.Get("Idempotency-Key")})
			msg, refuse := r.refused[req.URL.Path]
			r.mu.Unlock()
			if refuse {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg}})
				return
			}
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Refuse answers POSTs to path with a 400 invalid_request_error carrying
// msg from now on.
func (r *Recorder) Refuse(path, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused[path] = msg
}

// Posts returns the POSTs to path, oldest first.
func (r *Recorder) Posts(path string) []Post {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Post
	for _, p := range r.posts {
		if p.Path == path {
			out = append(out, p)
		}
	}
	return out
}

// Count is the number of POSTs seen, to any path.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.posts)
}
