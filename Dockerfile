# syntax=docker/dockerfile:1
#
# bulkhead operator image.
#
#   docker build -t ghcr.io/bulkhead-dev/bulkhead:0.1.0 .
#
# The binary is /bulkhead; the default command is `bulkhead run` (the
# controller). It runs as the distroless `nonroot` user (65532:65532), which
# is what the Helm chart's securityContext expects.

############################
# Build stage
############################
FROM rust:1.89-bookworm AS builder

WORKDIR /build

# 1. Dependencies only: build the crate's dependency graph against a dummy
#    lib and bin so this layer is cached until Cargo.toml/Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src \
 && echo '// dummy' > src/lib.rs \
 && echo 'fn main() {}' > src/main.rs \
 && cargo build --release --locked --bin bulkhead \
 && rm -rf src \
    target/release/bulkhead* \
    target/release/deps/bulkhead-* \
    target/release/deps/libbulkhead-* \
    target/release/.fingerprint/bulkhead-*

# 2. The real sources.
COPY src ./src
RUN touch src/lib.rs src/main.rs \
 && cargo build --release --locked --bin bulkhead \
 && cp target/release/bulkhead /bulkhead

############################
# Runtime stage
############################
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="bulkhead" \
      org.opencontainers.image.description="Kubernetes operator that enforces and verifies bulkhead isolation between classes of work" \
      org.opencontainers.image.source="https://github.com/bulkhead-dev/bulkhead" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=builder /bulkhead /bulkhead

USER 65532:65532
# /healthz, /readyz and /metrics (--metrics-addr 0.0.0.0:8080).
EXPOSE 8080

ENTRYPOINT ["/bulkhead"]
CMD ["run"]
