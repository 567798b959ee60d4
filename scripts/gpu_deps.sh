#!/usr/bin/env bash
# Prepares what the GPU machine's build lacks (it has Python's torch, CMake, Ninja and nvcc, no network): the
# header-only and small libraries deepspeed-cpp builds against, as Debian packages downloaded here and unpacked
# into .gpu_deps/prefix (ignored by git; the device tool carries it: carry [".gpu_deps"]). scripts/gpu_check.sh
# points CMake at .gpu_deps/prefix/usr. Idempotent; needs apt's package lists (scripts/setup.sh refreshes them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.gpu_deps
packages=(libgloo-dev nlohmann-json3-dev libcli11-dev liburing-dev liburing2 libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian)
mkdir -p "$dir/debs" "$dir/prefix"
cd "$dir/debs"
for p in "${packages[@]}"; do
  ls "${p}"_*.deb > /dev/null 2>&1 || apt-get download -q "$p"
done
for deb in *.deb; do dpkg-deb -x "$deb" "$dir/prefix"; done
# GoogleTest's and Benchmark's CMake files sit under lib/<arch>/cmake; the prefix keeps Debian's layout, which
# CMake searches with CMAKE_LIBRARY_ARCHITECTURE.
du -sh "$dir/prefix" | sed 's/^/gpu_deps: prefix /'
