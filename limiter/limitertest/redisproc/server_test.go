package redisproc

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A redis-server that cannot bind its port exits at once: start says so
// with the log's reason, without waiting out the ten-second ping, so that
// StartServer can take another port (CI saw a cluster node's bus port
// taken by an outgoing connection, and a 10 s "connection refused").
func TestStartReportsAServerThatExited(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: t.TempDir()}
	began := time.Now()
	err = s.start()
	s.Kill()
	if !errors.Is(err, errExited) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("start on a taken port: %v; want errExited naming the address in use", err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("took %v to notice (the ping's deadline is 10 s)", d)
	}
	t.Logf("noticed in %v: %v", time.Since(began), err)
	// And StartServer gets a server that answers.
	if got := StartServer(t, "--cluster-enabled", "yes"); got.port+clusterBusOffset >= ephemeralLow() {
		t.Fatalf("a cluster node on port %d: its bus %d is in the ephemeral range", got.port, got.port+clusterBusOffset)
	}
}
