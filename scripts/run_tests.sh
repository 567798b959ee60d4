#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install packages, build, run every test (unit and dist).
# Exits non-zero when any test fails. `.ci/run` calls exactly this.
#
# Machines of this kind differ in SIMD level (AVX2 only, or AVX-512), and a numeric bound that holds on one must hold
# on the other. So the tests labelled `numeric` (training compared with a reference) run a second time at another
# level than this CPU's best: AVX2 on an AVX-512 machine (our kernels, ATen's, and the MKL and oneDNN inside PyPI's
# LibTorch), the scalar paths (SSE4.2 for MKL) on an AVX2 one. Extra arguments go to the first ctest run only (e.g. -R zero_dist); DS_TEST_OTHER_SIMD=0 skips the
# second run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build_dir=${DS_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"

if [ "${DS_TEST_OTHER_SIMD:-1}" != 0 ] && [ $# -eq 0 ]; then
  if grep -qw avx512f /proc/cpuinfo; then
    other=(DS_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2)
  else
    other=(DS_SIMD=scalar ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41)
  fi
  echo "run_tests: numeric tests again with ${other[*]}"
  env "${other[@]}" ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" -L numeric
fi
