#!/usr/bin/env bash
# The GPU check (issue "GPUs"), run on the GPU machine from the repository root in one command:
#
#   bash scripts/gpu_check.sh            (the device tool: carry [".gpu_deps"]; results under $OUT)
#
# Builds what the `gpu`-labelled tests and the throughput bench need against the machine's own Python torch (its
# CMake prefix) and the Debian packages scripts/gpu_deps.sh unpacked into .gpu_deps (prepared on the build
# machine: the GPU machine has no network), then runs:
#   - ctest -L gpu: the optimizer's tensor-op steps on the GPU against the CPU kernels (bit for bit); ZeRO stages
#     0-3 against a plain LibTorch CUDA loop (SGD, fp32) and against stage 0 (fp32, bf16, optimizer offload to
#     pinned host memory), at world 1 over NCCL and 2 ranks sharing the GPU over Gloo with CUDA tensors; stage 3's
#     own suite at world 1;
#   - ds_report (the GPU section);
#   - bench_gpt_throughput: the ~350M GPT in bf16, stages 0 and 3 against a plain loop, model TFLOP/s.
# Everything it prints also lands in $OUT (default ./gpu_check_out). Exit status: 0 when the tests passed.
# Sized for one device-tool call (10 minutes at most): a build of ~3 minutes on 16 cores, the tests within 240 s
# (DS_GPU_TEST_TIMEOUT), the bench within 150 s (DS_GPU_BENCH_TIMEOUT). Checked here on CPU (build, every gpu test
# reported skipped, ds_report, the bench at small sizes): 400 s on 2 cores.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu_check_out}
mkdir -p "$out"
log() { echo "gpu_check: $*" | tee -a "$out/summary.txt"; }
deps=$root/.gpu_deps/prefix
if [ ! -d "$deps/usr" ]; then
  log "$deps is missing: run scripts/gpu_deps.sh on the build machine and carry .gpu_deps"
  exit 2
fi
nvidia-smi -L 2>&1 | tee "$out/gpus.txt"
python=${DS_GPU_PYTHON:-python3}
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') || { log "no torch in $python"; exit 2; }
log "torch $("$python" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
build=${DS_GPU_BUILD:-/tmp/ds_gpu_build}
start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDS_PYTHON="$python" \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" > "$out/configure.log" 2>&1 || { log "configure failed"; tail -30 "$out/configure.log"; exit 1; }
targets=(deepspeed_cli ds_report ops_test runtime_test swap_test zero_dist_test stage3_dist_test bench_gpt_throughput)
ninja -C "$build" -j"$(nproc)" "${targets[@]}" > "$out/build.log" 2>&1 || { log "build failed"; grep -m20 -A5 "error" "$out/build.log"; exit 1; }
log "built in $(( $(date +%s) - start )) s"

status=0
(cd "$build" && timeout ${DS_GPU_TEST_TIMEOUT:-240} ctest -L gpu --output-on-failure > "$out/ctest.log" 2>&1) || status=1
tail -15 "$out/ctest.log" | tee -a "$out/summary.txt"
"$build/bin/ds_report" > "$out/ds_report.txt" 2>&1
sed -n '/^GPU:/,/^---/p' "$out/ds_report.txt" | tee -a "$out/summary.txt"
timeout ${DS_GPU_BENCH_TIMEOUT:-150} "$build/bin/bench_gpt_throughput" ${DS_GPU_BENCH_ARGS:-} > "$out/throughput.txt" 2>&1 \
  || log "bench_gpt_throughput failed or timed out (exit $?)"
tee -a "$out/summary.txt" < "$out/throughput.txt"
log "done in $(( $(date +%s) - start )) s, tests $( [ $status = 0 ] && echo passed || echo FAILED )"
exit $status
