package stripemock_test

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/stripemock"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stripemock.Stop()
	os.Exit(code)
}

func TestStartServesOnLoopback(t *testing.T) {
	base := stripemock.Start(t)
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("base %q is not loopback", base)
	}
	if again := stripemock.Start(t); again != base {
		t.Fatalf("second Start gave %q, want the same server %q", again, base)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/subscriptions/sub_123", nil)
	req.SetBasicAuth("sk_test_123", "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"object":"subscription"`) {
		t.Fatalf("GET subscription: %d %s", resp.StatusCode, body)
	}
}
