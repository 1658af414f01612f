package notify

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// Bad input is a 400 naming the field; a host resolving to a private,
// loopback, link-local or metadata address is a 422 on url.
func TestCreateRefusesBadAndPrivateURLs(t *testing.T) {
	b := setup(t, Options{})
	ctx := context.Background()
	for _, c := range []struct {
		in    EndpointInput
		code  apperr.Code
		field string
	}{
		{EndpointInput{URL: ""}, apperr.Invalid, "url"},
		{EndpointInput{URL: "http://example.com/hook"}, apperr.Invalid, "url"},
		{EndpointInput{URL: "ftp://example.com/hook"}, apperr.Invalid, "url"},
		{EndpointInput{URL: "https://u:p@example.com/"}, apperr.Invalid, "url"},
		{EndpointInput{URL: "https://example.com/", Events: []string{"quota.threshold", "quota.nope"}}, apperr.Invalid, "events[1]"},
		{EndpointInput{URL: "https://127.0.0.1/hook"}, apperr.Unprocessable, "url"},
		{EndpointInput{URL: "https://localhost:8443/hook"}, apperr.Unprocessable, "url"},
		{EndpointInput{URL: "https://10.1.2.3/hook"}, apperr.Unprocessable, "url"},
		{EndpointInput{URL: "https://169.254.169.254/latest"}, apperr.Unprocessable, "url"},
		{EndpointInput{URL: "https://[::1]/hook"}, apperr.Unprocessable, "url"},
		{EndpointInput{URL: "https://[fd00:ec2::254]/"}, apperr.Unprocessable, "url"},
		{EndpointInput{URL: "https://100.64.0.1/"}, apperr.Unprocessable, "url"},
	} {
		_, err := b.svc.Create(ctx, c.in)
		e, ok := apperr.As(err)
		if !ok || e.Code != c.code || len(e.Fields) == 0 || e.Fields[0].Field != c.field {
			t.Errorf("%+v: %v, want %s on %s", c.in, err, c.code, c.field)
		}
	}
	// A public address literal needs no lookup and is accepted.
	ep, err := b.svc.Create(ctx, EndpointInput{URL: "https://203.0.113.10/hook", Events: []string{TypeQuotaThreshold}, Description: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if ep.ID == "" || !ep.Enabled || len(ep.Events) != 1 {
		t.Errorf("created %+v", ep)
	}
}

// Flags open what they name, and only that.
func TestAllowFlags(t *testing.T) {
	ctx := context.Background()
	b := setup(t, Options{AllowHTTP: true})
	if _, err := b.svc.Create(ctx, EndpointInput{URL: "http://203.0.113.10/"}); err != nil {
		t.Errorf("http with AllowHTTP: %v", err)
	}
	if _, err := b.svc.Create(ctx, EndpointInput{URL: "http://127.0.0.1/"}); apperr.CodeOf(err) != apperr.Unprocessable {
		t.Errorf("loopback with AllowHTTP only: %v, want 422", err)
	}
	b.svc.opts.AllowPrivate = true
	if _, err := b.svc.Create(ctx, EndpointInput{URL: "http://127.0.0.1/"}); err != nil {
		t.Errorf("loopback with AllowPrivate: %v", err)
	}
}

// Get, list, patch, delete and rotate; a secret is shown by create and
// rotate only; an unknown id is not found; patch validates like create.
func TestEndpointLifecycle(t *testing.T) {
	b := setup(t, Options{AllowPrivate: true})
	ctx := context.Background()
	ep, err := b.svc.Create(ctx, EndpointInput{URL: "https://example.com/a"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.svc.Get(ctx, ep.ID)
	if err != nil || got.Secret != "" || got.URL != ep.URL {
		t.Fatalf("get %+v %v", got, err)
	}
	off, u := false, "https://example.com/b"
	ev := []string{TypeSubscriptionStatus}
	p, err := b.svc.Patch(ctx, ep.ID, EndpointPatch{URL: &u, Events: &ev, Enabled: &off})
	if err != nil || p.URL != u || p.Enabled || len(p.Events) != 1 {
		t.Fatalf("patch %+v %v", p, err)
	}
	bad := []string{"nope"}
	if _, err := b.svc.Patch(ctx, ep.ID, EndpointPatch{Events: &bad}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("patch bad events: %v", err)
	}
	l, err := b.svc.List(ctx)
	if err != nil || len(l) != 1 || l[0].Secret != "" {
		t.Fatalf("list %+v %v", l, err)
	}
	if err := b.svc.Delete(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{b.svc.Delete(ctx, ep.ID), func() error { _, err := b.svc.Get(ctx, ep.ID); return err }(),
		func() error { _, err := b.svc.RotateSecret(ctx, ep.ID); return err }(),
		func() error { _, err := b.svc.Get(ctx, "not-a-uuid"); return err }()} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%v, want not found", err)
		}
	}
}
