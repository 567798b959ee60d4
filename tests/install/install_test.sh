#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures, builds and runs an outside project against it,
# the way a user consumes deepspeed-cpp with find_package(DeepSpeedCpp).
#   usage: install_test.sh <build-dir> <consumer-source-dir> <scratch-dir>
set -euo pipefail
build_dir=$1 consumer_src=$2 scratch=$3
rm -rf "$scratch"
mkdir -p "$scratch"
cmake --install "$build_dir" --prefix "$scratch/prefix" > "$scratch/install.log"
for f in include/deepspeed/accelerator.h lib/libdeepspeed.so bin/deepspeed bin/ds_report bin/ds_plot \
         lib/cmake/DeepSpeedCpp/DeepSpeedCppConfig.cmake; do
  [ -e "$scratch/prefix/$f" ] || { echo "install_test: $f missing from the installed tree"; exit 1; }
done
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$consumer_src" -B "$scratch/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" "${launcher[@]}" \
  > "$scratch/configure.log" || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/consumer" > "$scratch/build.log" || { cat "$scratch/build.log"; exit 1; }
# The installed library must be found through the consumer's RPATH, not through the build tree.
out=$("$scratch/consumer/consumer")
echo "$out"
grep -q "accelerator=cpu backend=gloo" <<< "$out"
grep -q "error ok: .*device index" <<< "$out" || grep -q "error ok: cpu accelerator has one device" <<< "$out"
# The installed tools run from the prefix.
"$scratch/prefix/bin/ds_report" > /dev/null
