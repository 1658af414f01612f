package api_test

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgatehq/tollgate/api"
)

// Tollgate is Apache-2.0: the LICENSE holds the licence's full text, the
// OpenAPI document says so (it said "Proprietary", which keeps teams from
// importing the limiter), and the project files a newcomer looks for exist.
func TestLicenceAndProjectFiles(t *testing.T) {
	lic, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(string(lic), want) {
			t.Errorf("LICENSE lacks %q: not the full Apache-2.0 text", want)
		}
	}
	var doc struct {
		Info struct {
			License struct{ Name, Identifier string }
		}
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.License.Identifier != "Apache-2.0" {
		t.Errorf("openapi.yaml info.license = %+v, want identifier Apache-2.0", doc.Info.License)
	}
	for _, f := range []string{"SECURITY.md", "CONTRIBUTING.md", "CHANGELOG.md"} {
		if b, err := os.ReadFile("../" + f); err != nil || len(b) < 200 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
}
