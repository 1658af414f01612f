package testkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a command of the product (cmd/api, cmd/worker) running as a
// process of the test, killed with SIGKILL when the test ends. Tests that
// need "two api instances" or "a worker killed mid-flush" mean processes:
// nothing is shared between them but Postgres and Redis.
type Proc struct {
	// Base is the api's http://host:port (StartAPI only).
	Base string

	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	logs   strings.Builder
}

// StartAPI runs bin ("serve") with env added to the test's environment and
// returns once it logs "api listening" (set HTTP_ADDR=127.0.0.1:0 so each
// process takes its own port).
func StartAPI(t testing.TB, bin string, env []string) *Proc {
	t.Helper()
	addrc := make(chan string, 1)
	p := start(t, "api", bin, []string{"serve"}, env, func(line []byte) {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "api listening" {
			select {
			case addrc <- rec.Addr:
			default:
			}
		}
	})
	select {
	case addr := <-addrc:
		p.Base = "http://" + addr
	case <-p.exited:
		t.Fatalf("api exited before listening:\n%s", p.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("api not listening within 60s:\n%s", p.Logs())
	}
	return p
}

// StartWorker runs bin (cmd/worker) with env added to the test's
// environment. Its ERROR lines (every line with TEST_LOG set) go to t.Log.
func StartWorker(t testing.TB, bin string, env []string) *Proc {
	t.Helper()
	return start(t, "worker", bin, nil, env, nil)
}

func start(t testing.TB, name, bin string, args, env []string, onLine func([]byte)) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, exited: make(chan struct{})}
	verbose := os.Getenv("TEST_LOG") != ""
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if onLine != nil {
				onLine(sc.Bytes())
			}
			if name == "worker" && (verbose || strings.Contains(sc.Text(), "ERROR")) {
				t.Logf("worker: %s", sc.Text())
			}
		}
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.Kill)
	return p
}

// Logs is what the process wrote to stderr so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Kill ends the process with SIGKILL and waits for it; a second call is a
// no-op.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Do sends a JSON request to the api with a bearer token and decodes the
// JSON answer (nil when it is not an object).
func (p *Proc) Do(t testing.TB, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	st, out, err := p.Request(method, path, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return st, out
}

// Request is Do for goroutines other than the test's: it returns the
// error instead of failing the test.
func (p *Proc) Request(method, path, token string, body any) (int, map[string]any, error) {
	var rd *bytes.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(raw)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, p.Base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}
