# cgperf's container image, as deploy/kubernetes/base/daemonset.yaml runs it.
#
#   buildah build -t cgperf:latest .        (or: docker build -t cgperf:latest .)
#
# Two stages: a Rust toolchain image builds the release binary; the image
# that ships holds only that binary (stripped), the few shared libraries it
# links against and the CA certificates for OTLP over TLS — no shell, no
# package manager. The debug info is split off into its own stage:
#
#   buildah build --target debuginfo --output type=local,dest=out .
#
# gives out/cgperf.debug, which gdb and perf find through the binary's
# .gnu_debuglink.
#
# RUST_IMAGE is any Debian-based image with cargo on PATH, gcc and binutils
# (the official rust images are; protoc is installed when missing); the test
# suite builds one locally.

ARG RUST_IMAGE=docker.io/library/rust:1-bookworm

FROM ${RUST_IMAGE} AS build
# true: build from the crates already in CARGO_HOME, without the network.
ARG CARGO_NET_OFFLINE=false
# protoc generates the CRI client (k8s-cri) at build time.
RUN command -v protoc >/dev/null || { apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*; }
WORKDIR /src
COPY . .
RUN set -eu; \
    cargo build --release --locked --bin cgperf; \
    mkdir -p /rootfs/usr/bin /debug; \
    objcopy --only-keep-debug target/release/cgperf /debug/cgperf.debug; \
    objcopy --strip-all --add-gnu-debuglink=/debug/cgperf.debug \
        target/release/cgperf /rootfs/usr/bin/cgperf; \
    # The dynamic loader and every library ldd resolves, at the same paths.
    for lib in $(ldd /rootfs/usr/bin/cgperf | grep -o '/[^ ]*'); do \
        cp --parents -L "$lib" /rootfs/; \
    done; \
    if [ -f /etc/ssl/certs/ca-certificates.crt ]; then \
        cp --parents /etc/ssl/certs/ca-certificates.crt /rootfs/; \
    fi

FROM scratch AS debuginfo
COPY --from=build /debug/cgperf.debug /cgperf.debug

FROM scratch
COPY --from=build /rootfs/ /
# Root inside the container, with only the capabilities the DaemonSet adds
# (PERFMON, DAC_READ_SEARCH): the host's cgroup and tracefs files are
# root's.
USER 0
EXPOSE 9810
ENTRYPOINT ["/usr/bin/cgperf"]
