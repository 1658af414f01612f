package credits

import (
	"cmp"
	"slices"
)

// Drawable are the grants of gs that can still be drawn (active, and
// pending ones that take effect later), by meter and then in the order a
// decision draws them: priority (lower first), earliest expiry (none
// last), creation. Explain and the console list them so.
func Drawable(gs []Grant) []Grant {
	out := []Grant{}
	for _, g := range gs {
		if g.Status == StatusActive || g.Status == StatusPending {
			out = append(out, g)
		}
	}
	slices.SortStableFunc(out, func(a, b Grant) int {
		if c := cmp.Compare(a.Meter, b.Meter); c != 0 {
			return c
		}
		return drawOrder(a, b)
	})
	return out
}

// drawOrder compares two grants of one meter as a decision draws them.
func drawOrder(a, b Grant) int {
	if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
		return c
	}
	switch {
	case a.ExpiresAt == nil && b.ExpiresAt != nil:
		return 1
	case a.ExpiresAt != nil && b.ExpiresAt == nil:
		return -1
	case a.ExpiresAt != nil && !a.ExpiresAt.Equal(*b.ExpiresAt):
		return a.ExpiresAt.Compare(*b.ExpiresAt)
	}
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}
