#!/usr/bin/env bash
# Installs every Debian package deepspeed-cpp needs to build, test and run. Idempotent: a second run installs nothing.
# Runs as root on Debian 12 (uses sudo when started as another user).
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config ccache git
  # LibTorch 1.13 (CPU) and the Gloo headers that ProcessGroupGloo.hpp needs
  libtorch-dev libgloo-dev
  # OpenBLAS: Debian's default reference BLAS makes LibTorch's matmul ~20x slower (shared/FACTS.md)
  libopenblas0-pthread
  # config, command lines, NVMe I/O
  nlohmann-json3-dev libcli11-dev liburing-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # tests inspect processes (no orphan ranks)
  procps
  # checkpoint interop tests: Python's torch.load must read our checkpoint files (Debian's PyTorch 1.13, ~18 MB)
  python3-torch
  # monitor tests: TensorBoard event files are read back with Google's protobuf library (~1 MB)
  python3-protobuf
  # ds_plot draws csv_monitor runs with gnuplot (no X11); its tests render real PNGs
  gnuplot-nox
  # multi-node launch: the pdsh/ssh/openmpi backends, and the test that runs them across network
  # namespaces with an sshd per namespace (tests/launcher/multinode_netns_test.sh)
  openssh-client openssh-server pdsh openmpi-bin iproute2
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} packages already installed"
fi

# DeepSpeed reads config files with hjson; tests/config compares our reader with it file by file (Debian 12 has no
# python3-hjson, so it comes from PyPI; without it that one test is skipped).
python3 -c 'import hjson' 2>/dev/null || PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet 'hjson==3.1.0' ||
  echo "setup: warning: could not install the hjson Python package; the config reader is not compared with DeepSpeed's"

# libopenblas0-pthread registers itself as the libblas.so.3 alternative with a higher priority than the reference
# BLAS; make sure an earlier manual choice does not keep the slow one.
blas_alt=libblas.so.3-$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
if update-alternatives --query "$blas_alt" >/dev/null 2>&1; then
  if ! update-alternatives --query "$blas_alt" | grep -q '^Value: .*openblas'; then
    "${sudo_cmd[@]}" update-alternatives --auto "$blas_alt"
  fi
  echo "setup: BLAS is $(update-alternatives --query "$blas_alt" | sed -n 's/^Value: //p')"
fi
