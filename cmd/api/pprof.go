//go:build pprof

package main

// Built only with -tags pprof: serves net/http/pprof on PPROF_ADDR (default
// 127.0.0.1:6060) so that the api can be profiled under load (httpload,
// side-by-side.sh) without the client sharing its profile, as cmd/bench
// -http's in-process server does. Normal builds have no such listener.

import (
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
)

func init() {
	addr := os.Getenv("PPROF_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6060"
	}
	go func() { _ = http.ListenAndServe(addr, nil) }()
}
