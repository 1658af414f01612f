package notify

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// examples/webhook-receiver-ts (TypeScript, the standardwebhooks npm
// package) verifies deliveries signed by this package, during a secret
// rotation with the old secret and with the new one, and refuses a
// tampered body. It needs node and the example's node_modules (npm ci).
func TestTypeScriptReceiverVerifiesDeliveries(t *testing.T) {
	dir, err := filepath.Abs("../../examples/webhook-receiver-ts")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks")); err != nil {
		t.Skipf("run npm ci in %s first", dir)
	}
	if out, err := exec.Command(node, filepath.Join(dir, "node_modules", "typescript", "bin", "tsc"), "-p", dir).CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	r := newReceiver(t)
	ep, err := b.svc.Create(ctx, EndpointInput{URL: r.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rot, err := b.svc.RotateSecret(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	b.emit(t, Event{Type: TypeQuotaThreshold, Data: map[string]any{"meter": "requests"}})
	waitFor(t, "the delivery", func() bool { return len(r.requests()) == 1 })
	g := r.requests()[0]
	verify := func(secret, body string) (string, error) {
		h := map[string]string{}
		for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			h[k] = g.header.Get(k)
		}
		raw, _ := json.Marshal(map[string]any{"headers": h, "body": body})
		f := filepath.Join(t.TempDir(), "delivery.json")
		if err := os.WriteFile(f, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(node, filepath.Join(dir, "dist", "receiver.js"), f)
		cmd.Env = append(os.Environ(), "TOLLGATE_WEBHOOK_SECRET="+secret)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for name, sec := range map[string]string{"old": ep.Secret, "new": rot.Secret} {
		out, err := verify(sec, string(g.body))
		if err != nil || !strings.Contains(out, `"verified":true`) || !strings.Contains(out, g.header.Get("webhook-id")) {
			t.Errorf("%s secret: %v\n%s", name, err, out)
		}
	}
	if out, err := verify(rot.Secret, strings.Replace(string(g.body), "requests", "requestz", 1)); err == nil || !strings.Contains(out, `"verified":false`) {
		t.Errorf("a tampered body verified: %s", out)
	}
}
