# The fencekit image: the operator (/manager, the entrypoint) and the fencekit CLI (/fencekit: `fencekit elect`
# as a token sidecar, and `fencekit run` to copy into a workload's own image with
# COPY --from=ghcr.io/fencekit/fencekit:TAG /fencekit /usr/local/bin/fencekit), static binaries on distroless,
# running as non-root.
FROM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags "-s -w -X github.com/fencekit/fencekit/internal/version.Version=${VERSION} -X github.com/fencekit/fencekit/internal/version.Commit=${COMMIT}" \
    -o manager ./cmd/manager && \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags "-s -w -X github.com/fencekit/fencekit/internal/version.Version=${VERSION} -X github.com/fencekit/fencekit/internal/version.Commit=${COMMIT}" \
    -o fencekit ./cmd/fencekit

FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager /workspace/fencekit ./
USER 65532:65532
ENTRYPOINT ["/manager"]
