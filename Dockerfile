# syntax=docker/dockerfile:1
#
# bulkhead operator image (the controller and the `bulkhead proxy` sidecar).
#
#   docker build -t bulkhead:dev .
#
# The binary is /bulkhead; the default command is `bulkhead run` (the
# controller). It runs as the distroless `nonroot` user (65532:65532), which
# is what the Helm chart's securityContext and the injected sidecar expect.
#
# Base images are pinned by digest (bump deliberately: `docker buildx
# imagetools inspect IMAGE:TAG`, the index digest). They are build arguments
# only so that a machine without a registry can put locally made equivalents
# in their place (tests/image does that); every step below runs unchanged.
ARG BUILDER_IMAGE=docker.io/library/rust:1.89-bookworm@sha256:948f9b08a66e7fe01b03a98ef1c7568292e07ec2e4fe90d88c07bb14563c84ff
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f

############################
# Build stage
############################
FROM ${BUILDER_IMAGE} AS builder

WORKDIR /build

# 1. Dependencies only, cached until Cargo.toml or Cargo.lock change. The
#    manifest declares test, bench and example targets whose files the image
#    never needs; cargo refuses a manifest that names missing files, so the
#    build uses the manifest without those sections (they add no dependency:
#    dev-dependencies are not built for a release binary). Dummy libs and a
#    bin stand in for the sources of the workspace crates.
COPY Cargo.toml Cargo.lock ./
COPY crates/bulkhead-admission/Cargo.toml ./crates/bulkhead-admission/
COPY crates/bulkhead-proxy/Cargo.toml ./crates/bulkhead-proxy/
COPY testkit/Cargo.toml ./testkit/
# h2 with the project's patch (patches/README.md), a dependency like the others.
COPY patches/h2 ./patches/h2
RUN awk '/^\[\[(test|bench|example)\]\]/ { skip = 1; next } /^\[/ { skip = 0 } !skip' Cargo.toml >Cargo.toml.deps \
 && mv Cargo.toml.deps Cargo.toml \
 && mkdir -p src crates/bulkhead-admission/src crates/bulkhead-proxy/src testkit/src \
 && echo '// dependencies only' > src/lib.rs \
 && echo 'fn main() {}' > src/main.rs \
 && echo '// dependencies only' > crates/bulkhead-admission/src/lib.rs \
 && echo '// dependencies only' > crates/bulkhead-proxy/src/lib.rs \
 && echo '// dependencies only' > testkit/src/lib.rs \
 && cargo build --release --locked --bin bulkhead \
 && rm -rf src crates/bulkhead-admission/src crates/bulkhead-proxy/src \
    target/release/bulkhead* \
    target/release/deps/bulkhead-* \
    target/release/deps/libbulkhead-* \
    target/release/deps/libbulkhead_admission-* \
    target/release/deps/libbulkhead_proxy-* \
    target/release/.fingerprint/bulkhead-*

# 2. The real sources: a change to tests or docs does not rebuild the image.
COPY crates ./crates
COPY src ./src
RUN find src crates -name '*.rs' -exec touch {} + \
 && cargo build --release --locked --bin bulkhead \
 && cp target/release/bulkhead /bulkhead

############################
# Runtime stage
############################
FROM ${RUNTIME_IMAGE}

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="bulkhead" \
      org.opencontainers.image.description="Kubernetes operator that enforces and verifies bulkhead isolation between classes of work" \
      org.opencontainers.image.source="https://github.com/bulkhead-dev/bulkhead" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

COPY --from=builder /bulkhead /bulkhead

USER 65532:65532
# mimalloc (the allocator) turns transparent huge pages off for the process,
# also on nodes whose kernel gives them to every large mapping (THP
# "always"): with them an idle proxy connection cost twice the memory.
ENV MIMALLOC_ALLOW_THP=0
# /healthz, /readyz and /metrics (--metrics-addr 0.0.0.0:8080).
EXPOSE 8080

ENTRYPOINT ["/bulkhead"]
CMD ["run"]
