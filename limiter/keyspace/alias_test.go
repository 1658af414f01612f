package keyspace_test

import (
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// The alias key is protocol too: pinned like the rest of the layout.
func TestAliasLayout(t *testing.T) {
	if got := (keyspace.Keys{Prefix: "p"}).Alias("acct:42@eu"); got != "p:{x:acct:42@eu}:tid" {
		t.Fatalf("Alias = %q", got)
	}
	if got := (keyspace.Keys{}).Alias("a"); got != "tg:{x:a}:tid" {
		t.Fatalf("default prefix: %q", got)
	}
}

// The external id rule accepts its charset up to 128 bytes and refuses
// what would break a path segment, a key or a hash tag.
func TestValidExternalID(t *testing.T) {
	long := strings.Repeat("a", keyspace.MaxExternalIDLen)
	for s, want := range map[string]bool{
		"acct:42@eu": true, "A.b_c-d": true, long: true,
		"": false, long + "a": false, "a/b": false, "a{b}": false, "a b": false, "a%20": false, "é": false,
	} {
		if got := keyspace.ValidExternalID(s); got != want {
			t.Errorf("ValidExternalID(%q) = %v, want %v", s, got, want)
		}
	}
}
