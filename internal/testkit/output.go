package testkit

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"testing"
)

// Buffer is an io.Writer a test can read while the code under test (a
// command's run, a logger) still writes to it from another goroutine.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Getenv turns a map into the getenv a command's run takes.
func Getenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Unique is name with eight random hex digits, for the rows (tenants,
// plans) a test makes in a database other tests share.
func Unique(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// Logger sends a service's log lines to t's output, so that a failing
// test shows what the service said.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
