#!/usr/bin/env bash
# consumer-check.sh: a backend's view of the limiter module. Creates a tiny
# consumer module in a temporary directory OUTSIDE the repository that
# imports only the limiter (through a replace to this checkout), builds it
# and runs its test against Redis with the lowest Go the limiter supports,
# and checks its module graph: at most MAX_MODULES modules, and none but
# go-redis, golang.org/x/{time,sync} and their own requirements beside the
# consumer and the limiter. The limiter's go line must be at most MAX_GO,
# with no toolchain line.
#
#   scripts/consumer-check.sh          (make consumer-check; .ci/run runs it)
#
# Redis: REDISTEST_URL, default redis://127.0.0.1:6379/0 (limitertest's).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# Recorded bounds. Raise them only on purpose: every module here is one a
# backend takes into its own graph as a version floor.
MAX_MODULES=14  # consumer, limiter, go-redis, x/time, x/sync and their own requirements
MAX_GO=1.26.0   # the go line of limiter/go.mod (go-redis and x/* need 1.26.0)

fail() { echo "consumer-check: $*" >&2; exit 1; }

golimiter=$(awk '$1 == "go" {print $2}' limiter/go.mod)
grep -q '^toolchain' limiter/go.mod && fail "limiter/go.mod has a toolchain line: a backend would be made to download it"
[ "$(printf '%s\n%s\n' "$golimiter" "$MAX_GO" | sort -V | tail -1)" = "$MAX_GO" ] ||
  fail "limiter/go.mod says go $golimiter, above the recorded $MAX_GO"

dir=$(mktemp -d "${TMPDIR:-/tmp}/limiter-consumer-XXXXXX")
trap 'rm -rf "$dir"' EXIT
case "$dir" in "$repo"/*) fail "temporary directory $dir is inside the repository" ;; esac

cat >"$dir/go.mod" <<MOD
module example.com/consumer

go $golimiter

require github.com/tollgatehq/tollgate/limiter v0.0.0

replace github.com/tollgatehq/tollgate/limiter => $repo/limiter
MOD
cat >"$dir/consumer.go" <<'GO'
// Package consumer is a backend that limits its tenants with Tollgate's limiter.
package consumer

import (
	"context"

	"github.com/tollgatehq/tollgate/limiter"
)

// Export decides one export of tenant.
func Export(ctx context.Context, l *limiter.Limiter, tenant string) (bool, error) {
	d, err := l.Allow(ctx, tenant, limiter.Request{Meter: "exports"})
	if err != nil {
		return false, err
	}
	return d.Allowed, nil
}
GO
cat >"$dir/consumer_test.go" <<'GO'
package consumer

import (
	"context"
	"testing"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

func TestExportQuota(t *testing.T) {
	rdb, prefix := limitertest.Redis(t)
	snap := limitertest.Snapshot("acme", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"exports": {Limit: 1}}
	})
	limitertest.PutSnapshot(t, rdb, prefix, snap)
	l := limitertest.New(t, rdb, limiter.Options{Prefix: prefix})
	for i, want := range []bool{true, false} {
		ok, err := Export(context.Background(), l, "acme")
		if err != nil || ok != want {
			t.Fatalf("export %d: %v %v, want %v", i, ok, err, want)
		}
	}
}
GO

cd "$dir"
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN="go$golimiter"
go mod tidy
go version
go vet ./...
CI=${CI:-} go test -count=1 ./...

# The graph: every module but the consumer and the limiter is go-redis,
# x/time, x/sync or reachable from them.
mapfile -t mods < <(go list -m -f '{{.Path}}' all)
echo "consumer-check: ${#mods[@]} modules: ${mods[*]}"
[ "${#mods[@]}" -le "$MAX_MODULES" ] || fail "${#mods[@]} modules in the consumer's graph, above the recorded $MAX_MODULES"
reach=$(go mod graph | awk '
  { from[NR] = $1; to[NR] = $2 }
  END {
    n = split("github.com/redis/go-redis/v9 golang.org/x/time golang.org/x/sync", roots, " ")
    for (i = 1; i <= n; i++) ok[roots[i]] = 1
    do {
      grew = 0
      for (e = 1; e <= NR; e++) {
        f = from[e]; sub(/@.*/, "", f); t = to[e]; sub(/@.*/, "", t)
        if (ok[f] && !ok[t]) { ok[t] = 1; grew = 1 }
      }
    } while (grew)
    for (m in ok) print m
  }')
for m in "${mods[@]}"; do
  case "$m" in example.com/consumer | github.com/tollgatehq/tollgate/limiter) continue ;; esac
  grep -qxF "$m" <<<"$reach" || fail "$m is in the consumer's graph but is not go-redis, x/time, x/sync or theirs"
done
goconsumer=$(awk '$1 == "go" {print $2}' go.mod)
[ "$(printf '%s\n%s\n' "$goconsumer" "$MAX_GO" | sort -V | tail -1)" = "$MAX_GO" ] ||
  fail "the consumer's go line became $goconsumer, above the recorded $MAX_GO"
echo "consumer-check: ok (go $goconsumer, ${#mods[@]} modules)"
