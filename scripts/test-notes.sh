#!/usr/bin/env bash
# Printed by `make test` after the suite, so that its last lines say what did
# not run: without Chromium (and without CI set, where the browser tests fail
# instead of skipping) the browser tests skipped, and how to get them.
set -euo pipefail
chromium=${CHROMIUM:-/usr/bin/chromium} # where web/browser/browser_test.go looks
if [ -z "${CI:-}" ] && [ ! -x "$chromium" ]; then
  cat <<MSG

make test: the browser tests (web/browser, real Chromium via chromedp) were SKIPPED:
  no Chromium at $chromium. Install it to run them:
    sudo apt-get install chromium        # Debian/Ubuntu (what CI uses: bash .ci/run)
  then run make test again (or: go test ./web/browser/).
MSG
fi
