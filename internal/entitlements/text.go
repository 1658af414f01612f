package entitlements

import (
	"slices"
)

// maxNameLen bounds a tenant's name, as the catalogue bounds a plan's.
const maxNameLen = 200

// uniqueSorted is in sorted, each value once: a new slice, never nil
// (stored in a NOT NULL array column, shown as []).
func uniqueSorted(in []string) []string {
	out := append([]string{}, in...)
	slices.Sort(out)
	return slices.Compact(out)
}
