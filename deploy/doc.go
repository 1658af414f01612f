// Package deploy holds what operators run Tollgate with, outside the binaries:
// Prometheus alert rules (prometheus/), a Grafana dashboard (grafana/) and
// Kubernetes manifests (kubernetes/). Its tests validate each offline: promtool
// over the rules and their unit tests, every queried metric against the
// metrics the code defines, and the manifests decoded strictly into the
// Kubernetes API types and loaded through internal/config.
package deploy
