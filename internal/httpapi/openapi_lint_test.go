package httpapi

import (
	"context"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// TestOpenAPIPassesRedoclyLint runs Redocly CLI's recommended ruleset over
// the document: 0 errors and 0 warnings. .ci/run installs the CLI
// (npm i -g @redocly/cli); locally a machine without it skips.
func TestOpenAPIPassesRedoclyLint(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("redocly")
	if err != nil {
		testkit.Unavailable(t, "redocly (npm i -g @redocly/cli)", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "lint", "--format=stylish", openAPIPath)
	cmd.Env = append(cmd.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
	// Redocly exits 0 with warnings; they are findings too.
	if regexp.MustCompile(`(?m)^\s+\d+:\d+\s+warning`).Match(out) {
		t.Fatalf("redocly lint reports warnings:\n%s", out)
	}
}
