# Tollgate. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
GO ?= go
export PATH := $(PATH):$(shell $(GO) env GOPATH)/bin
# ./... from the root stops at nested modules (limiter/ and bench/ have
# their own go.mod; go.work builds them together), so each is named. The
# limiter first: go test builds and starts packages in the order named, and
# the limiter's tests are the longest (about two minutes); named last, they
# ran alone at the end of make test.
MODULES := ./limiter/... ./... ./bench/...

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## make sure Postgres and Redis answer (starts throwaway ones if not)
	@scripts/services.sh

# VERSION is stamped into both binaries (`api version`, tollgate_build_info).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/tollgatehq/tollgate/internal/buildinfo.Version=$(VERSION)

.PHONY: build
build: ## build bin/api and bin/worker
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/api ./cmd/api
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/worker ./cmd/worker

.PHONY: run
run: services build ## migrate, seed the demo, run api and worker, print the dashboard URL and a demo key
	@scripts/run.sh

.PHONY: test
test: services ## run every test against real Postgres, Redis (and Cluster), stripe-mock and Chromium
	$(GO) build -o bin/stripe-mock github.com/stripe/stripe-mock
	@# The TypeScript webhook receiver example is run by a notify test; with npm here, install its locked packages once.
	@if command -v npm >/dev/null && [ ! -d examples/webhook-receiver-ts/node_modules/standardwebhooks ]; then npm ci --silent --prefix examples/webhook-receiver-ts; fi
	@echo "$(GO) test -race -count=1 -timeout 20m $(MODULES)"
	@status=0; $(GO) test -race -count=1 -timeout 20m $(MODULES) || status=$$?; scripts/test-notes.sh; exit $$status

.PHONY: lint
lint: ## go vet, gofmt check and staticcheck (pinned in go.mod as a tool), in every module
	$(GO) vet $(MODULES)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck $(MODULES)

.PHONY: consumer-check
consumer-check: ## a module outside the repo imports only the limiter: builds and tests on the lowest supported Go, module graph bounded
	@scripts/consumer-check.sh

.PHONY: bench
bench: services ## side-by-side benchmarks (libbench, side-by-side.sh from PERF_DIR=<folder>) and the 1M-key flush pass; see scripts/bench.sh
	@scripts/bench.sh

.PHONY: clean
clean: ## stop the throwaway Postgres and Redis, remove their data (TOLLGATE_DATA, default .data) and bin/
	@scripts/services.sh clean
	rm -rf bin

.PHONY: screenshots
screenshots: services ## refresh docs/screenshots/ from the browser tests
	@command -v chromium >/dev/null || { echo "screenshots: needs Chromium (apt-get install chromium); without it the browser tests skip"; exit 1; }
	UPDATE_SCREENSHOTS=1 $(GO) test -count=1 -run TestBrowser ./web/browser/
