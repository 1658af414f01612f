package entitlements

import (
	"maps"
	"slices"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// maxNameLen bounds a tenant's name, as the catalogue bounds a plan's.
const maxNameLen = 200

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// uniqueSorted is in sorted, each value once: a new slice, never nil
// (stored in a NOT NULL array column, shown as []).
func uniqueSorted(in []string) []string {
	out := append([]string{}, in...)
	slices.Sort(out)
	return slices.Compact(out)
}

var (
	cleanText = apperr.CleanText
	token     = apperr.Token
)
