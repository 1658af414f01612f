//go:build !linux

package pgtest

import (
	"errors"
	"testing"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// Server is a private Postgres; it needs Linux (the server is run as the
// postgres user when the tests run as root, and dies with the test binary).
type Server struct{ Port int }

// StartServer skips locally and fails when CI is set: private servers are
// Linux only.
func StartServer(t testing.TB) *Server {
	t.Helper()
	testkit.Unavailable(t, "a private postgres", errors.New("pgtest.StartServer needs Linux"))
	return nil
}

func (s *Server) URL(db string) string { return "" }
func (s *Server) Stop(t testing.TB)    {}
func (s *Server) Start(t testing.TB)   {}
func (s *Server) Pause(t testing.TB)   {}
func (s *Server) Resume(t testing.TB)  {}
