package testkit

import (
	"bytes"
	"sync"
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
