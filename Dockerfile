# cgperf's container image, as deploy/kubernetes/base/daemonset.yaml runs it:
# the release binary (statically linked: no shared libraries, no shell, no
# package manager), the CA certificates for OTLP over TLS, and the licences of
# the event tables the binary embeds.
#
# scripts/release builds it, as ghcr.io/cgperf/cgperf:VERSION, once per
# architecture (linux/amd64, linux/arm64: an image index of both), from a
# context directory holding that architecture's stripped binary (`cgperf`),
# the CA bundle (`ca-certificates.crt`) and `LICENSE.event-tables`; the
# binary's debug info is a release artifact of its own
# (dist/cgperf-VERSION.linux-ARCH.debug). No step runs a program, so
# building the arm64 image on an x86 machine needs no emulation: keep it so.
FROM scratch
COPY cgperf /usr/bin/cgperf
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY LICENSE.event-tables /usr/share/doc/cgperf/LICENSE.event-tables
# Root inside the container, with only the capabilities the DaemonSet adds
# (BPF, PERFMON, DAC_READ_SEARCH): the host's cgroup and tracefs files are
# root's.
USER 0
EXPOSE 9810
ENTRYPOINT ["/usr/bin/cgperf"]
