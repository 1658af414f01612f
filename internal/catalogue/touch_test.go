package catalogue_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// touches records the Touch calls of a test's catalogue: what each was
// told, whether its transaction saw the change, and whether its
// AfterCommit ran.
type touches struct {
	mu      sync.Mutex
	reaches []catalogue.Reach
	after   int
	fail    error
	// seen reads, inside the hook's transaction, what the test wants to
	// know was already written there.
	seen func(ctx context.Context, tx pgx.Tx) string
	saw  []string
}

func (h *touches) touch(ctx context.Context, tx pgx.Tx, r catalogue.Reach) (catalogue.Touched, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reaches = append(h.reaches, r)
	if h.seen != nil {
		h.saw = append(h.saw, h.seen(ctx, tx))
	}
	if h.fail != nil {
		return catalogue.Touched{}, h.fail
	}
	return catalogue.Touched{Tenants: []string{"t1"}, AfterCommit: func(context.Context) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.after++
	}}, nil
}

// A plan edit tells Touch the plan, the version to keep with "apply":
// "new", and the reason, in the edit's transaction after its writes; the
// AfterCommit runs once it committed. A preview tells it the same as a
// preview and never runs AfterCommit; a Touch error rolls the edit back.
func TestPlanEditTouchesTheTenantsInItsTransaction(t *testing.T) {
	t.Parallel()
	h := &touches{}
	b := setup(t, catalogue.Options{Touch: h.touch})
	key := uniq("p")
	b.mustPlan(t, catalogue.PlanInput{Key: key, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](10)}}})
	h.seen = func(ctx context.Context, tx pgx.Tx) string {
		var name string
		_ = tx.QueryRow(ctx, `SELECT name FROM plans WHERE key = $1`, key).Scan(&name)
		return name
	}
	rename := func(name string) catalogue.PlanPatch {
		return func(in *catalogue.PlanInput) error { in.Name = name; return nil }
	}

	if _, err := b.svc.PatchPlan(b.ctx, key, rename("Edited")); err != nil {
		t.Fatal(err)
	}
	if len(h.reaches) != 1 || !reflect.DeepEqual(h.reaches[0], catalogue.Reach{Plan: key, Reason: "plan " + key + " changed"}) || h.saw[0] != "Edited" || h.after != 1 {
		t.Fatalf("patch: reaches %+v, saw %q, after %d", h.reaches, h.saw, h.after)
	}

	e, err := b.svc.PreviewPlanPatch(b.ctx, key, func(in *catalogue.PlanInput) error { in.Name = "Previewed"; in.Apply = catalogue.ApplyNew; return nil })
	if err != nil || !slices.Equal(e.Tenants, []string{"t1"}) || e.After.Name != "Previewed" {
		t.Fatalf("preview = %+v, %v", e, err)
	}
	if r := h.reaches[1]; !r.Preview || r.Keep != 2 || r.Plan != key || h.saw[1] != "Previewed" || h.after != 1 {
		t.Fatalf("preview: reach %+v, saw %q, after %d", r, h.saw[1], h.after)
	}
	if p, _ := b.svc.GetPlan(b.ctx, key); p.Name != "Edited" || p.Version != 2 {
		t.Fatalf("plan after the preview = %+v", p)
	}

	if _, err := b.svc.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error { in.Apply = catalogue.ApplyNew; in.Name = "Kept"; return nil }); err != nil {
		t.Fatal(err)
	}
	if r := h.reaches[2]; r.Keep != 2 || r.Preview || h.after != 2 {
		t.Fatalf(`"apply": "new": reach %+v, after %d`, r, h.after)
	}

	h.fail = errors.New("tenants: no")
	if _, err := b.svc.PatchPlan(b.ctx, key, rename("Refused")); !errors.Is(err, h.fail) {
		t.Fatalf("patch with a failing Touch: %v", err)
	}
	if p, _ := b.svc.GetPlan(b.ctx, key); p.Name != "Kept" || p.Version != 3 || h.after != 2 {
		t.Fatalf("a Touch error must roll the edit back: %+v, after %d", p, h.after)
	}
}

// An add-on change reaches the tenants of the prices and product it had and
// of the ones it has; a delete, those it had.
func TestAddonChangeTouchesOldAndNewPrices(t *testing.T) {
	t.Parallel()
	h := &touches{}
	b := setup(t, catalogue.Options{Touch: h.touch})
	id, old, prod, added := uniq("price_addon"), uniq("price_old"), uniq("prod"), uniq("price_new")
	if _, created, err := b.svc.PutAddon(b.ctx, id, catalogue.AddonInput{Name: "Pack", Quotas: map[string]int64{"exports": 5},
		StripePriceIDs: []string{old}, StripeProductID: prod}); err != nil || !created {
		t.Fatalf("PutAddon = %v, %v", created, err)
	}
	if _, _, err := b.svc.PutAddon(b.ctx, id, catalogue.AddonInput{Name: "Pack", Quotas: map[string]int64{"exports": 5},
		StripePriceIDs: []string{added}}); err != nil {
		t.Fatal(err)
	}
	r := h.reaches[1]
	for _, p := range []string{id, old, added} {
		if !slices.Contains(r.Prices, p) {
			t.Errorf("replacing the add-on's prices: %s not reached (%v)", p, r.Prices)
		}
	}
	if !slices.Equal(r.Products, []string{prod}) || r.Reason != "add-on "+id+" changed" || h.after != 2 {
		t.Errorf("replacing the add-on's prices: reach %+v, after %d", r, h.after)
	}
	if err := b.svc.DeleteAddon(b.ctx, id); err != nil {
		t.Fatal(err)
	}
	if r := h.reaches[2]; !slices.Equal(r.Prices, []string{id, added}) || len(r.Products) != 0 || r.Reason != "add-on "+id+" removed" || h.after != 3 {
		t.Errorf("delete: reach %+v, after %d", r, h.after)
	}
	if err := b.svc.DeleteAddon(b.ctx, id); apperr.CodeOf(err) != apperr.NotFound || len(h.reaches) != 3 {
		t.Errorf("deleting it again = %v (reaches %d)", err, len(h.reaches))
	}
}
