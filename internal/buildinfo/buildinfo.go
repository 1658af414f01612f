// Package buildinfo says which build a process is: the version stamped at
// link time (make build passes git describe), else the module version, and
// the VCS revision Go records in the binary. Both binaries print it for
// `version` and export it as tollgate_build_info, so an operator can tell
// which build answers without shelling into the host.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is set with -ldflags "-X github.com/tollgatehq/tollgate/internal/buildinfo.Version=v1.2.3";
// empty falls back to the module version Go recorded ("(devel)" in a checkout).
var Version string

// Info is what a build knows about itself.
type Info struct {
	Version   string // v1.2.3, a git describe, or "(devel)"
	Revision  string // the VCS commit, "unknown" without VCS stamping
	Modified  bool   // built from a tree with uncommitted changes
	GoVersion string
}

// Read returns this binary's Info.
func Read() Info {
	in := Info{Version: Version, Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if in.Version == "" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	return in
}

// String is the one line `version` prints.
func (in Info) String() string {
	s := in.Version + " (revision " + in.Revision
	if in.Modified {
		s += ", modified"
	}
	return s + ", " + in.GoVersion + ")"
}

// Collector is the gauge tollgate_build_info, always 1, labelled with the
// build (the Prometheus convention for joining a build onto other series).
func Collector() prometheus.Collector {
	in := Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_build_info",
		Help: "Always 1; the labels name the build: version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": in.Revision, "goversion": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}
