package stripemock

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
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

// Post is one POST that reached the recorder, and what was answered.
type Post struct {
	Path           string
	Form           url.Values
	IdempotencyKey string
	Answer         map[string]any // the JSON answer (stripe-mock's object, or the error)
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
		if req.Method != http.MethodPost {
			proxy.ServeHTTP(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		r.mu.Lock()
		i := len(r.posts)
		r.posts = append(r.posts, Post{Path: req.URL.Path, Form: form, IdempotencyKey: req.Header.Get("Idempotency-Key")})
		msg, refuse := r.refused[req.URL.Path]
		r.mu.Unlock()
		// The answer is recorded before the client gets it, so a test
		// sees it as soon as its call returns.
		rr := httptest.NewRecorder()
		if refuse {
			rr.Header().Set("Content-Type", "application/json")
			rr.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(rr).Encode(map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg}})
		} else {
			proxy.ServeHTTP(rr, req)
		}
		var answer map[string]any
		_ = json.Unmarshal(rr.Body.Bytes(), &answer)
		r.mu.Lock()
		r.posts[i].Answer = answer
		r.mu.Unlock()
		for k, v := range rr.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rr.Code)
		_, _ = w.Write(rr.Body.Bytes())
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

// Unreachable returns the URL of a loopback port nothing listens on: a
// Stripe that is down (connections refused).
func Unreachable(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("stripemock: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}
