package logging

import (
	"context"
	"log/slog"
)

// Demote returns a logger that writes log's records below WARN at DEBUG.
// Libraries that narrate their routine at INFO (River's producer counts
// every few seconds, rivermigrate's line per migration that we log
// ourselves) then stay out of an INFO log, yet show with LOG_LEVEL=debug;
// their warnings and errors are kept as they are.
// A nil log stays nil (the library's own default).
func Demote(log *slog.Logger) *slog.Logger {
	if log == nil {
		return nil
	}
	return slog.New(demoted{log.Handler()})
}

type demoted struct{ h slog.Handler }

func lower(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (d demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, lower(l))
}

func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lower(r.Level)
	return d.h.Handle(ctx, r)
}

func (d demoted) WithAttrs(as []slog.Attr) slog.Handler { return demoted{d.h.WithAttrs(as)} }
func (d demoted) WithGroup(name string) slog.Handler    { return demoted{d.h.WithGroup(name)} }
