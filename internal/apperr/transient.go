package apperr

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether err means a dependency (Postgres, Redis) could
// not be reached or answered in time, rather than a bug: such errors are a
// 503 with Retry-After, never a 500. Postgres' connection errors, its
// "cannot connect now" and "too many connections" states, network errors,
// refused and reset connections, and deadlines all count.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if e, ok := As(err); ok {
		return e.Code == Unavailable
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.Timeout(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) == 5 && pe.Code[:2] == "08": // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300":
			// admin/crash shutdown, cannot connect now, too many connections
			return true
		}
		return false
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}
