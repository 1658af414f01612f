# syntax=docker/dockerfile:1
#
# Tollgate's images. Targets:
#   runtime (default)  api and worker, static, on distroless as a non-root user
#   stripe-mock        stripe-mock at the version pinned in go.mod (v0.189.0)
#
#   docker build -t tollgate .                       # then: tollgate serve | migrate | seed-demo
#   docker build -t tollgate-stripe-mock --target stripe-mock .

ARG GO_VERSION=1.26.8

# --- build: static binaries (no cgo), reproducible paths -------------------
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# GOWORK=off: the product builds with its go.mod, whose replace points at
# ./limiter (the limiter module), not with the development go.work.
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off
COPY go.mod go.sum ./
COPY limiter/go.mod limiter/go.sum ./limiter/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# VERSION: what `api version` and tollgate_build_info say (.git is not in the
# context): docker build --build-arg VERSION=$(git describe --tags --always --dirty) .
ARG VERSION=devel
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w -X github.com/tollgatehq/tollgate/internal/buildinfo.Version=${VERSION}" -o /out/api ./cmd/api && \
    go build -trimpath -ldflags="-s -w -X github.com/tollgatehq/tollgate/internal/buildinfo.Version=${VERSION}" -o /out/worker ./cmd/worker

# --- stripe-mock, from the tool pin in go.mod (so tests and compose agree) -
FROM golang:${GO_VERSION}-bookworm AS stripe-mock-build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off
COPY go.mod go.sum ./
COPY limiter/go.mod limiter/go.sum ./limiter/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/stripe-mock github.com/stripe/stripe-mock

# --- a static wget for health checks (distroless has no shell or curl) -----
FROM busybox:1.37-musl AS tools

FROM gcr.io/distroless/static-debian12:nonroot AS stripe-mock
COPY --from=tools /bin/busybox /usr/local/bin/wget
COPY --from=stripe-mock-build /out/stripe-mock /usr/local/bin/stripe-mock
USER nonroot:nonroot
EXPOSE 12111
ENTRYPOINT ["/usr/local/bin/stripe-mock", "-http-addr", ":12111"]

# --- runtime: the default target -------------------------------------------
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=tools /bin/busybox /usr/local/bin/wget
COPY --from=build /out/api /out/worker /usr/local/bin/
# Listen on every interface inside the container; publish the port to choose
# who can reach it.
ENV HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080 9464 9091
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/api"]
CMD ["serve"]
