package keyspace_test

import (
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
