#!/usr/bin/env bash
# Installs everything deepspeed-cpp needs to build, test and run: Debian's packages, then a Python virtual environment
# inside the checkout (.venv, ignored by git) with the pinned torch (LibTorch 2.x: headers, libraries, CMake package),
# deepspeed and hjson of requirements.txt. Idempotent: a second run installs nothing.
# Runs as root on Debian 12 (uses sudo when started as another user).
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config ccache git
  # LibTorch comes from PyPI's torch (below); its wheel lacks the Gloo headers that ProcessGroupGloo.hpp includes
  libgloo-dev
  # the virtual environment for torch, deepspeed and hjson
  python3-venv
  # config, command lines, NVMe I/O
  nlohmann-json3-dev libcli11-dev liburing-dev
  # tokenizers: the byte-level BPE pre-tokenizer regexes (Unicode classes, look-ahead); SentencePiece models;
  # Unicode normal forms (Qwen2's NFC normalizer)
  libpcre2-dev libsentencepiece-dev libicu-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # ds_serve's HTTP server (OpenAI-compatible endpoints, server-sent events); curl drives it in the serving tests
  libcpp-httplib-dev curl
  # tests inspect processes (no orphan ranks)
  procps
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

# Python: torch (LibTorch to build against; ~1 GB download, ~5 GB installed with its NVIDIA libraries), deepspeed and
# hjson, pinned in requirements.txt, in .venv. A user with their own LibTorch points CMake at it (README, Build notes)
# and needs none of this but for the tests that compare with Python.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  /usr/bin/python3 -m venv "$venv"
fi
# pip's own check is slow (it resolves every pin); a stamp of the requirements file it last installed skips it.
stamp=$venv/.requirements.installed
if ! cmp -s "$root/requirements.txt" "$stamp"; then
  # pip downloads every wheel (~3 GB) before it installs them (~5.4 GB): the install peaked at 8.4 GB on the checkout's
  # file system here. A machine short of it stops now with the figures, not with pip's "No space left" halfway.
  # (A new torch pin downloads as much again beside the old install; DS_SETUP_NEED_MB=0 skips the check.) pip's
  # temporary files go beside the venv (TMPDIR), not to a /tmp that may be a small RAM disk, and it keeps no cache
  # of the wheels (they would stay, another ~3 GB, after the install).
  pip_tmp=$venv/.pip-tmp
  rm -rf "$pip_tmp"  # a killed run's wheels would count against the space
  trap 'rm -rf "$pip_tmp"' EXIT
  need_mib=${DS_SETUP_NEED_MB:-9000}
  if [ "$need_mib" != 0 ]; then
    if ! [[ $need_mib =~ ^[0-9]{1,9}$ ]]; then
      echo "setup: DS_SETUP_NEED_MB must be a number of MiB (at most 9 digits; 0 skips the check), got '$need_mib'" >&2
      exit 1
    fi
    free_mib=$(df -Pm "$venv" 2> /dev/null | awk 'NR == 2 { print $4 }' || true)
    if ! [[ $free_mib =~ ^[0-9]+$ ]]; then
      echo "setup: warning: df cannot say how much space is free for $venv; installing anyway" >&2
    elif [ "$free_mib" -lt "$need_mib" ]; then
      echo "setup: installing requirements.txt into $venv needs about $need_mib MiB free there (torch with its" \
        "NVIDIA libraries); $free_mib MiB are free (DS_SETUP_NEED_MB sets the bar)" >&2
      exit 1
    fi
  fi
  echo "setup: installing requirements.txt into $venv"
  mkdir -p "$pip_tmp"
  TMPDIR=$pip_tmp "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
    -r "$root/requirements.txt"
  rm -rf "$pip_tmp"
  cp "$root/requirements.txt" "$stamp"
else
  echo "setup: $venv has requirements.txt"
fi
