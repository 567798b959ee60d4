#!/usr/bin/env bash
# The GPU check (issue "GPUs"), run on the GPU machine from the repository root in one command:
#
#   bash scripts/gpu_check.sh            (the device tool: carry [".gpu_deps"]; results under $OUT)
#
# Builds what the `gpu`-labelled tests and the benches need against the machine's own Python torch (its CMake
# prefix) and the Debian packages scripts/gpu_deps.sh unpacked into .gpu_deps (prepared on the build machine: the
# GPU machine has no network), then runs, in this order (the most needed first, so a slow build cuts the benches):
#   - ctest -L gpu (tests/gpu/CMakeLists.txt, 6 at a time): the optimizer's tensor-op steps on the GPU against the
#     CPU kernels (bit for bit); ZeRO stages 0-3 against a plain LibTorch CUDA loop and against stage 0 (fp32,
#     bf16, optimizer offload to pinned host memory and NVMe), at world 1 over NCCL and 2 ranks sharing the GPU over
#     Gloo with CUDA tensors; the precision keys, ZenFlow; stage 3 with parameter offload and ZeRO++;
#   - ds_report (the GPU section);
#   - bench_gpt_throughput: the ~350M GPT in bf16, stages 0 and 3 against a plain loop, model TFLOP/s, each stage
#     with the fused CUDA Adam and again with the tensor-op step, and where each side's time goes;
#   - bench_llama_throughput: a Llama 3.2 1B-shaped model in bf16, seq 2048, stages 0 and 3: tokens/s and MFU;
#   - bench_offload_step: a 0.65B GPT in bf16 at stage 2 (12 layers of hidden 2048: the 1.3B one's 24 layers take
#     most of the 150 s in pinning and setup), offload_optimizer none / cpu / cpu with overlap_step
#     (pinned), model TFLOP/s.
# Everything it prints also lands in $OUT (default ./gpu_check_out). Exit status: 0 when the tests passed.
# Sized for one device-tool call (10 minutes at most): each phase's timeout is cut to what is left of
# DS_GPU_DEADLINE_S (default 560 s from the start), the tests at most 240 s, the benches 150 s each; the time the
# tests leave for the benches is DS_GPU_TEST_RESERVE (200 s), the throughput bench's for the offload one
# DS_GPU_BENCH_RESERVE (140 s: the Llama bench then gets up to 100 s, leaving 40 s for the offload one).
# Narrowing a rerun: DS_GPU_TEST_REGEX (ctest -R), DS_GPU_BUILD_TYPE (RelWithDebInfo gives line numbers), and
# DS_GPU_GDB="<test binary>:<gtest filter> ...": each run alone under cuda-gdb beside the tests, its backtrace at a
# crash appended to $OUT/gdb.txt.
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
nvidia-smi -L 2>&1 | tee -a "$out/summary.txt"
python=${DS_GPU_PYTHON:-python3}
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') \
  || { log "no torch in $python"; exit 2; }
log "torch $("$python" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
# The fused CUDA optimizer steps need nvcc (the build falls back to tensor-op steps without it, and the gpu test
# FusedCudaSteps then fails, saying so); the toolkit's usual place when it is not on PATH.
if ! command -v nvcc > /dev/null && [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
log "nvcc: ${CUDACXX:-$(command -v nvcc || echo none)}"
build=${DS_GPU_BUILD:-/tmp/ds_gpu_build}
start=$(date +%s)
deadline=$(( start + ${DS_GPU_DEADLINE_S:-560} ))
# cap <most> <reserve>: seconds a phase may take, at most <most>, leaving <reserve> for the phases after it; never
# below 0 (timeout 0 would mean no limit): a phase given less than its minimum is skipped with a message.
cap() {
  local left=$(( deadline - $(date +%s) - $2 ))
  left=$(( left < 0 ? 0 : left ))
  echo $(( left < $1 ? left : $1 ))
}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${DS_GPU_BUILD_TYPE:-Release} -DDS_PYTHON="$python" \
  -DDS_CUDA_ARCHITECTURES="${DS_GPU_CUDA_ARCH:-90}" -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" \
  > "$out/configure.log" 2>&1 \
  || { log "configure failed"; tail -30 "$out/configure.log"; exit 1; }
targets=(deepspeed_cli ds_report comm_device_test ops_test runtime_test activation_checkpointing_test swap_test
         zero_dist_test stage3_dist_test tp_dist_test moe_dist_test sequence_dist_test gpt_pipeline_dist_test
         engine_checkpoint_dist_test bench_gpt_throughput bench_llama_throughput bench_offload_step)
# A target that fails to build does not stop the others' runs (ctest reports a missing executable).
build_status=0
ninja -C "$build" -k 0 -j"$(nproc)" "${targets[@]}" > "$out/build.log" 2>&1 \
  || { build_status=1; log "build failed"; grep -m20 -A5 "error" "$out/build.log"; }
[ -x "$build/bin/deepspeed" ] || { log "no launcher built: nothing to run"; exit 1; }
log "built in $(( $(date +%s) - start )) s"
# Where std::filesystem binds (a session saw our calls land in PyPI torch 2.11's broken copies in libtorch.so on this
# machine, though the binaries name libstdc++ first: cmake/DeepSpeedTorch.cmake): the facts to settle it.
{
  echo "--- link diagnostics"
  cmake --version | head -1
  cxx=$(grep -m1 '^CMAKE_CXX_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)
  echo "compiler $cxx, its libstdc++.so: $("$cxx" -print-file-name=libstdc++.so)"
  readelf -d "$build/bin/zero_dist_test" | grep NEEDED | head -4
  ldd "$build/bin/zero_dist_test" | grep -E "stdc|libtorch.so"
  grep -m1 -o -- "-Wl,--push-state[^ ]* [^ ]* [^ ]*" "$build/build.ninja"
  readelf --dyn-syms -W "$build/bin/zero_dist_test" | grep -m2 "remove_all"
  LD_BIND_NOW=1 LD_DEBUG=bindings "$build/bin/runtime_test" --gtest_filter=LinkOrder.* 2>&1 | grep -m3 "remove_all"
  "$build/bin/runtime_test" --gtest_filter=LinkOrder.* 2>&1 | grep -E "OK|FAILED|bound to"
  echo "---"
} 2>&1 | tee -a "$out/summary.txt"

status=$build_status
t=$(cap 240 ${DS_GPU_TEST_RESERVE:-200})
[ "$t" -ge 20 ] || { log "tests skipped: $t s left"; t=0; status=1; }
gdb_pids=()
gdb=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
i=0
set -f  # the gtest filters' '*' are not file patterns
for spec in ${DS_GPU_GDB:-}; do
  [ "$t" -gt 0 ] || break
  i=$((i + 1))
  (cd "$build" && timeout "$t" "$gdb" -q -batch -ex 'set pagination off' -ex run -ex 'bt 40' \
     --args "bin/${spec%%:*}" "--gtest_filter=${spec#*:}" > "$out/gdb_$i.part" 2>&1) &
  gdb_pids+=($!)
done
set +f
if [ "$t" -gt 0 ]; then
  log "tests: up to $t s"
  (cd "$build" && timeout "$t" ctest -L gpu ${DS_GPU_TEST_REGEX:+-R "$DS_GPU_TEST_REGEX"} -j6 --output-on-failure \
     > "$out/ctest.log" 2>&1) || status=1
fi
for pid in ${gdb_pids[@]+"${gdb_pids[@]}"}; do wait "$pid"; done
for part in "$out"/gdb_*.part; do
  [ -e "$part" ] || continue
  { echo "=== $part"; grep -v "^\[New Thread\|^\[Thread .* exited" "$part"; } >> "$out/gdb.txt"
  rm -f "$part"
done
log "tests done at $(( $(date +%s) - start )) s"
[ -e "$out/ctest.log" ] && grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed|Failed|Timeout|Not Run" \
  "$out/ctest.log" | tee -a "$out/summary.txt"
timeout 60 "$build/bin/ds_report" > "$out/ds_report.txt" 2>&1
{ grep -i "fused CUDA" "$out/ds_report.txt"; sed -n '/^GPU:/,/^---/p' "$out/ds_report.txt"; } \
  | tee -a "$out/summary.txt"

t=$(cap 150 ${DS_GPU_BENCH_RESERVE:-140})
if [ "$t" -ge 30 ]; then
  log "bench_gpt_throughput: up to $t s"
  # shellcheck disable=SC2086
  timeout "$t" "$build/bin/bench_gpt_throughput" ${DS_GPU_BENCH_ARGS:---tensor-op-steps} \
    > "$out/throughput.txt" 2>&1 \
    || log "bench_gpt_throughput failed or timed out (exit $?)"
  tee -a "$out/summary.txt" < "$out/throughput.txt"
  log "throughput done at $(( $(date +%s) - start )) s"
else
  log "bench_gpt_throughput skipped: $t s left"
fi

t=$(cap 100 40)
if [ "$t" -ge 30 ]; then
  log "bench_llama_throughput: up to $t s"
  # shellcheck disable=SC2086
  timeout "$t" "$build/bin/bench_llama_throughput" ${DS_GPU_LLAMA_ARGS:-} > "$out/llama.txt" 2>&1 \
    || log "bench_llama_throughput failed or timed out (exit $?)"
  tee -a "$out/summary.txt" < "$out/llama.txt"
  log "llama done at $(( $(date +%s) - start )) s"
else
  log "bench_llama_throughput skipped: $t s left"
fi

t=$(cap 150 5)
if [ "$t" -ge 40 ]; then
  log "bench_offload_step: up to $t s"
  offload_args=${DS_GPU_OFFLOAD_ARGS:---bf16 --stage 2 --hidden 2048 --layers 12 --heads 16 --seq-len 1024 \
    --vocab 50304 --micro 8 --no-nvme --kinds none,cpu,cpu+overlap --pin-memory --steps 4 --block 2 --warmup 1}
  # shellcheck disable=SC2086
  timeout "$t" "$build/bin/bench_offload_step" $offload_args \
    > "$out/offload.txt" 2>&1 || log "bench_offload_step failed or timed out (exit $?)"
  tee -a "$out/summary.txt" < "$out/offload.txt"
else
  log "bench_offload_step skipped: $t s left"
fi
log "done in $(( $(date +%s) - start )) s, tests $( [ $status = 0 ] && echo passed || echo FAILED )"
exit $status
