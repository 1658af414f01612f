package logging

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// A line logged with a request's context names the request, so an error
// can be matched to its access log line; other lines do not.
func TestLinesLoggedForARequestNameIt(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, slog.LevelInfo).With("component", "api")
	log.ErrorContext(WithRequestID(context.Background(), "req-42"), "rate limit decision failed")
	log.Info("api listening")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"request_id":"req-42"`) || strings.Contains(lines[1], "request_id") {
		t.Fatalf("lines:\n%s", buf.String())
	}
	if RequestID(WithRequestID(context.Background(), "x")) != "x" || RequestID(context.Background()) != "" {
		t.Fatal("RequestID does not read back what WithRequestID put in")
	}
}
