package redisproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Callgrind names a redis-server run under valgrind --tool=callgrind (see
// scripts/scriptcost.sh and scripts/flushcost.sh): its instruction counts
// are the one measure of what Redis spends that the machine's load does
// not move. The zero value (PID "") is a server not under callgrind: Zero
// does nothing and Dump returns 0.
type Callgrind struct {
	PID string // the valgrind process
	Out string // its --callgrind-out-file; dumps are <Out>.<n>
}

// CallgrindFromEnv reads <prefix>_CALLGRIND_PID and <prefix>_CALLGRIND_OUT.
func CallgrindFromEnv(prefix string) Callgrind {
	return Callgrind{PID: os.Getenv(prefix + "_CALLGRIND_PID"), Out: os.Getenv(prefix + "_CALLGRIND_OUT")}
}

// Zero resets the counts.
func (c Callgrind) Zero(t testing.TB) {
	t.Helper()
	if c.PID == "" {
		return
	}
	if out, err := exec.Command("callgrind_control", "-z", c.PID).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control -z: %v: %s", err, out)
	}
}

// Dump writes the counts since Zero to a new file and returns the
// instructions they hold.
func (c Callgrind) Dump(t testing.TB) int64 {
	t.Helper()
	if c.PID == "" {
		return 0
	}
	before, _ := filepath.Glob(c.Out + ".*")
	if out, err := exec.Command("callgrind_control", "-d", c.PID).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control -d: %v: %s", err, out)
	}
	after, _ := filepath.Glob(c.Out + ".*")
	for _, f := range after {
		if slices.Contains(before, f) {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "summary: "); ok {
				n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				return n
			}
		}
	}
	t.Fatalf("callgrind: no new dump of %s.*", c.Out)
	return 0
}
