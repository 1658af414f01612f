// Package stripemock starts Stripe's own mock API server, stripe-mock
// v0.189.0 (a tool in go.mod), on loopback for tests of outbound Stripe
// calls. It keeps no state and sends no webhooks: it checks the shape of
// requests against Stripe's OpenAPI spec and answers canned objects.
//
// One server serves a whole test package: Start builds and starts it on
// first use; Stop (from TestMain) or the test binary's exit kills it.
package stripemock

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

var (
	once    sync.Once
	baseURL string
	cmd     *exec.Cmd
	initErr error
)

// Start returns the base URL (http://127.0.0.1:port) of the package's
// stripe-mock. Without it a test fails when CI is set and skips otherwise.
func Start(t testing.TB) string {
	t.Helper()
	once.Do(func() { initErr = start() })
	if initErr != nil {
		testkit.Unavailable(t, "stripe-mock", initErr)
	}
	return baseURL
}

// Stop kills the server; call it from TestMain after m.Run.
func Stop() {
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Version is the stripe-mock pinned in go.mod (newer ones embed an API
// version that stripe-go v79 mis-decodes).
const Version = "v0.189.0"

var listenRe = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

func start() error {
	bin, err := binary()
	if err != nil {
		return err
	}
	// Both addresses on loopback: given only one, stripe-mock opens the
	// other on every interface.
	cmd = exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	setDeathSignal(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if m := listenRe.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case addr := <-found:
		baseURL = "http://" + addr
		return nil
	case <-time.After(30 * time.Second):
		Stop()
		return fmt.Errorf("stripe-mock printed no listening address within 30s")
	}
}

// binary finds bin/stripe-mock at the module root, else builds the pinned
// tool from go.mod into a temporary directory.
func binary() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if p := filepath.Join(root, "bin", "stripe-mock"); isExec(p) {
		return p, nil
	}
	// Built once per machine into the user cache, named by the pinned
	// version; written to a temporary name and renamed so that packages
	// testing in parallel never run a half-written file.
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "tollgate")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "stripe-mock-"+Version)
	if runtime.GOOS == "windows" {
		p += ".exe"
	}
	if isExec(p) {
		return p, nil
	}
	tmp, err := os.CreateTemp(dir, "stripe-mock-build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	build := exec.Command("go", "build", "-o", tmp.Name(), "github.com/stripe/stripe-mock")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build stripe-mock: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return "", err
	}
	return p, nil
}

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
