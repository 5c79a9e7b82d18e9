# syntax=docker/dockerfile:1.7
# The holdfast image: both binaries (/holdfast-controller, /holdfast-webhook), built with the
# workspace's release profile (thin LTO, 4 codegen units, symbols stripped), on distroless/cc:
# no shell, no package manager, glibc and CA roots only, running as the nonroot user
# 65532:65532 (the chart's runAsUser). The chart picks the binary with `command`.
#
#   docker build -t ghcr.io/holdfast-dev/holdfast:0.1.0 .
ARG RUST_VERSION=1.95
# Debian 12 on both sides: the binaries link against the same glibc they run on.
FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p holdfast-controller -p holdfast-webhook \
 && mkdir -p /out \
 && cp target/release/holdfast-controller target/release/holdfast-webhook /out/

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/holdfast-dev/holdfast" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.description="holdfast: runtime snapshots and numbered holds for Kubeflow Trainer TrainJobs"
COPY --from=build /out/holdfast-controller /out/holdfast-webhook /
USER 65532:65532
ENTRYPOINT ["/holdfast-controller"]
