#!/usr/bin/env bash
# ZeRO's memory saving as the kernel measures it: each stage's peak resident memory per rank (VmHWM over the whole
# run: model construction, engine start, every step; read at exit by train_gpt's peak_rss_mb, the largest rank's),
# beside the formula's model-state saving, with no allowance. One training run per row, each in fresh processes.
#
#   [MODELS="25m 13m"] [PRECISIONS="fp32 bf16"] [RANKS="2 4"] [CONFIGS="defaults tuned"] [ALLOCATORS="cache glibc"] \
#     [STEPS=3] [MALLOC_ENV="MALLOC_MMAP_THRESHOLD_=131072"] bench/zero/run_zero_memory.sh [BIN_DIR]
#
# BIN_DIR (default build/bin) holds `deepspeed` and `train_gpt`. Models: 25m = 8 layers, hidden 512 (4 heads), vocab
# 256, seq 32, micro-batch 4 (25.5M parameters); 13m = the reference GPT (6 layers, hidden 384, vocab 4096, seq 128,
# untied head, micro-batch 8; 13.8M). Configs: examples/configs/gpt_zero{0,1,2,3}.json with the micro-batch above and,
# for bf16, "bf16": {"enabled": true}: "tuned" as they are (CPU-sized buckets and stage-3 bounds), "defaults" with
# zero_optimization reduced to its stage (DeepSpeed's default buckets, what a new user's config has). The
# environment as it comes; MALLOC_ENV adds variables (e.g. MALLOC_MMAP_THRESHOLD_=131072, glibc returning freed
# large blocks at once, which also turns off the library's host block cache). Allocators: "cache" is the library's
# default on CPU (its host block cache, src/accelerator/host_block_cache.h), "glibc" the same run with
# DS_HOST_ALLOCATOR=default (LibTorch's own allocator and the stage-3 per-step heap trim: the library before the
# cache). Each row's saving is against stage 0 with the same allocator; "cpu s" is the user + system seconds of all
# ranks (start-up included), steadier than tokens/s on a shared machine.
#
# The formula (bytes per parameter, per rank, N ranks): parameters P, gradients G, optimizer states O (Adam: fp32
# m and v, plus the fp32 master when the model is not fp32). fp32: P=4 G=4 O=8; bf16: P=2 G=4 (accumulated in
# fp32) O=12; bf16acc: bf16 with data_types.grad_accum_dtype "bf16", G=2; bf16m:
# bf16 with bf16_master_weights_and_grads and bf16_optimizer_states (stages 1-3), G=2 O=4 (bf16 m and v; the
# masters are the weights themselves). Stage 1 partitions O, stage 2 also G, stage 3 also P: the saving vs stage 0 is
# the partitioned terms times (1 - 1/N). The table gives the measured saving (stage 0's peak minus the stage's; bf16m,
# which has no stage 0, against bf16's stage 0) and its ratio to the formula's; for bf16acc and bf16m also the peak
# against bf16's at the same stage (run them after bf16: PRECISIONS="bf16 bf16acc bf16m") beside the formula's
# difference: bf16acc 2 bytes a parameter (2 / N from stage 2 on); bf16m 2 + 8 / N at stage 1, 10 / N from stage 2.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-build/bin}
for exe in "$BIN/deepspeed" "$BIN/train_gpt"; do
  [[ -x $exe ]] || { echo "run_zero_memory.sh: $exe not found (pass the bin folder)" >&2; exit 2; }
done
MODELS=${MODELS:-"25m 13m"}
PRECISIONS=${PRECISIONS:-"fp32 bf16"}
RANKS=${RANKS:-"2 4"}
STEPS=${STEPS:-3}
CONFIGS=${CONFIGS:-"defaults tuned"}
ALLOCATORS=${ALLOCATORS:-"cache glibc"}
MALLOC_ENV=${MALLOC_ENV:-"DS_BENCH_ENV=as-it-comes"}  # env(1) needs one assignment
PORT=${MASTER_PORT:-29781}
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/zero_memory.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

model_args() {
  case $1 in
    25m) echo "--layers 8 --hidden 512 --vocab 256 --seq_len 32" ;;
    13m) echo "--layers 6 --hidden 384 --heads 6 --vocab 4096 --seq_len 128 --untied_head" ;;
    *) echo "run_zero_memory.sh: unknown model '$1' (25m or 13m)" >&2; exit 2 ;;
  esac
}
micro_of() { [[ $1 == 25m ]] && echo 4 || echo 8; }

echo "zero memory: models [$MODELS], precisions [$PRECISIONS], ranks [$RANKS], configs [$CONFIGS]," \
  "allocators [$ALLOCATORS], $STEPS steps," \
  "$MALLOC_ENV; start: $(uptime)"
printf "%-5s %-7s %-5s %-8s %-6s %-6s %12s %12s %14s %14s %8s %10s %8s\n" model prec ranks config alloc stage "params" \
  "peak MB" "saving MB" "formula MB" ratio "tokens/s" "cpu s"
ticks=$(getconf CLK_TCK)
# user + system seconds of this shell's reaped descendants (/proc/PID/stat fields 16-17)
children_cpu() { awk -v t="$ticks" '{ printf "%.2f", ($16 + $17) / t }' /proc/$$/stat; }
for model in $MODELS; do
  for prec in $PRECISIONS; do
    for n in $RANKS; do
     for kind in $CONFIGS; do
     for alloc in $ALLOCATORS; do
      case $alloc in
        cache) alloc_env="DS_HOST_ALLOCATOR=cache" ;;
        glibc) alloc_env="DS_HOST_ALLOCATOR=default" ;;
        *) echo "run_zero_memory.sh: unknown allocator '$alloc' (cache or glibc)" >&2; exit 2 ;;
      esac
      [[ $MALLOC_ENV == *MALLOC_* ]] && alloc_env="DS_BENCH_ALLOCATOR=$alloc"  # the user's glibc settings decide
      base=""
      for stage in 0 1 2 3; do
        [[ $prec == bf16m && $stage == 0 ]] && continue
        cfg="$WORK/z${stage}_${prec}_${model}_$kind.json"
        "$PYTHON" - "$ROOT/examples/configs/gpt_zero$stage.json" "$cfg" "$(micro_of "$model")" "$prec" "$kind" <<'PY'
import json, sys
src, dst, micro, prec, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
c = json.load(open(src))
if kind == "defaults":
    c["zero_optimization"] = {"stage": c.get("zero_optimization", {}).get("stage", 0)}
c["train_micro_batch_size_per_gpu"] = micro
c["steps_per_print"] = 1000000
if prec in ("bf16", "bf16acc", "bf16m"):
    c["bf16"] = {"enabled": True}
if prec == "bf16m":
    c["bf16"].update({"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True})
if prec == "bf16acc":
    c["data_types"] = {"grad_accum_dtype": "bf16"}
json.dump(c, open(dst, "w"))
PY
        # shellcheck disable=SC2046
        cpu0=$(children_cpu)
        out=$(env $MALLOC_ENV $alloc_env "$BIN/deepspeed" --num_procs "$n" --master_port "$PORT" "$BIN/train_gpt" \
                --deepspeed_config "$cfg" $(model_args "$model") --steps "$STEPS" 2>&1) || {
          echo "$out" | tail -20 >&2; echo "run_zero_memory.sh: stage $stage $prec $model at $n ranks failed" >&2
          exit 1; }
        cpu=$(awk -v a="$cpu0" -v b="$(children_cpu)" 'BEGIN { printf "%.1f", b - a }')
        params=$(echo "$out" | sed -n 's/.*train_gpt: \([0-9]*\) parameters.*/\1/p' | head -1)
        peak=$(echo "$out" | sed -n 's/.*peak_rss_mb=\([0-9.]*\).*/\1/p' | head -1)
        tps=$(echo "$out" | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' | head -1)
        [[ -n $params && -n $peak ]] || { echo "$out" | tail -20 >&2; exit 1; }
        other0=bf16_peak_${n}_${kind}_${alloc}_0
        [[ $prec == bf16m && -n ${!other0:-} ]] && base=${!other0}
        [[ -z $base ]] && base=$peak
        [[ $prec == bf16 ]] && eval "bf16_peak_${n}_${kind}_${alloc}_$stage=$peak"
        awk -v m="$model" -v p="$prec" -v n="$n" -v s="$stage" -v psi="$params" -v peak="$peak" -v base="$base" \
            -v kind="$kind" -v tps="$tps" -v alloc="$alloc" -v cpu="$cpu" '
          BEGIN {
            P = (p == "fp32") ? 4 : 2; G = (p == "bf16acc" || p == "bf16m") ? 2 : 4;
            O = (p == "fp32") ? 8 : (p == "bf16m") ? 4 : 12;
            f = 1 - 1 / n; per = 0;
            if (s >= 1) per += O * f; if (s >= 2) per += G * f; if (s >= 3) per += P * f;
            # bf16m against bf16 stage 0 (P 2 + G 4 + O 12 = 18 bytes a parameter).
            if (p == "bf16m") per = 18 - ((s >= 3 ? 2 / n : 2) + (s >= 2 ? 2 / n : 2) + 4 / n);
            formula = per * psi / 1048576; saving = base - peak;
            ratio = (s == 0) ? "-" : sprintf("%.2f", saving / formula);
            printf "%-5s %-7s %-5s %-8s %-6s %-6s %12d %12.1f %14.1f %14.1f %8s %10s %8s\n", m, p, n, kind, alloc, s, psi,
                   peak, saving, formula, ratio, tps, cpu
          }'
        other=bf16_peak_${n}_${kind}_${alloc}_$stage
        if [[ ( $prec == bf16acc || $prec == bf16m ) && -n ${!other:-} ]]; then
          awk -v p="$prec" -v n="$n" -v s="$stage" -v psi="$params" -v peak="$peak" -v bf16="${!other}" 'BEGIN {
            per = (p == "bf16acc") ? (s >= 2 ? 2 / n : 2) : (s >= 2 ? 10 / n : 2 + 8 / n);
            formula = per * psi / 1048576;
            printf "      %s vs bf16 at stage %d: %.1f MB lower (formula %.1f: %.2f)\n", p, s, bf16 - peak, formula,
                   (bf16 - peak) / formula }'
        fi
      done
     done
     done
    done
  done
done
echo "end: $(uptime)"
