// Package logging builds the process's slog logger: JSON lines on stderr at
// the configured level. Loggers are passed down, never global.
package logging

import (
	"io"
	"log/slog"
)

// New returns a JSON logger writing to w at level.
func New(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(withRequestID{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}
