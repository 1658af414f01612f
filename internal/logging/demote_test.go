package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestDemoteMovesInfoToDebugAndKeepsWarnings(t *testing.T) {
	var info, debug bytes.Buffer
	atInfo := Demote(New(&info, slog.LevelInfo))
	atDebug := Demote(New(&debug, slog.LevelDebug)).With("component", "river")
	for _, l := range []*slog.Logger{atInfo, atDebug} {
		l.Info("producer: Producer job counts")
		l.Warn("something to see")
	}
	if strings.Contains(info.String(), "producer") || !strings.Contains(info.String(), `"level":"WARN","msg":"something to see"`) {
		t.Fatalf("at INFO: %s", info.String())
	}
	if !strings.Contains(debug.String(), `"level":"DEBUG","msg":"producer: Producer job counts","component":"river"`) ||
		!strings.Contains(debug.String(), `"level":"WARN"`) {
		t.Fatalf("at DEBUG: %s", debug.String())
	}
}
