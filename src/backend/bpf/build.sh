#!/bin/sh
# Compiles count.bpf.c into $1 (default: count.bpf.o beside it) with Debian
# bookworm's clang 14 and libbpf-dev headers, for BPF v3 (compare-and-swap:
# Linux 5.12). BTF is kept (the loader needs
# it for the maps and the bpf_loop callback); the source directory is
# mapped to `.` in the line info BTF keeps, and DWARF, which holds absolute
# paths, is stripped so that the object is the same wherever it is built.
set -eu
cd "$(dirname "$0")"
out=${1:-count.bpf.o}
clang -O2 -g -target bpf -mcpu=v3 -fdebug-prefix-map="$PWD"=. -I/usr/include/"$(uname -m)"-linux-gnu -c count.bpf.c -o "$out"
llvm-strip -g "$out"
