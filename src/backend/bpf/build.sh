#!/bin/sh
# Compiles count.bpf.c into $1 (default: count.bpf.o beside it) and
# sampled.bpf.c into $2 (default: sampled.bpf.o beside it; with $1 alone,
# only count.bpf.c is built) with Debian bookworm's clang 14 and libbpf-dev
# headers; count.bpf.c for BPF v3 (compare-and-swap: Linux 5.12). BTF is
# kept (the loader needs it for the maps and the bpf_loop callback); the
# source directory is mapped to `.` in the line info BTF keeps, and DWARF, which holds absolute paths, is stripped so that the
# object is the same wherever it is built.
set -eu
cd "$(dirname "$0")"
out=${1:-count.bpf.o}
clang -O2 -g -target bpf -mcpu=v3 -fdebug-prefix-map="$PWD"=. -I/usr/include/"$(uname -m)"-linux-gnu -c count.bpf.c -o "$out"
llvm-strip -g "$out"
if [ $# -eq 1 ]; then
    exit 0
fi
by=${2:-sampled.bpf.o}
clang -O2 -g -target bpf -fdebug-prefix-map="$PWD"=. -I/usr/include/"$(uname -m)"-linux-gnu -c sampled.bpf.c -o "$by"
llvm-strip -g "$by"
