#!/usr/bin/env bash
# DeepSpeed 0.19.8 vs deepspeed-cpp on the reference GPT (13.8M parameters), 2 ranks, fp32, one table:
#
#   [ROUNDS=2] [STEPS=6] [WARMUP=2] bench/peer/run_peer.sh [BIN_DIR]
#
# BIN_DIR (default build/bin) holds `deepspeed` (our launcher) and `bench_peer_ours`. DeepSpeed runs on the CPU
# accelerator (DS_ACCELERATOR=cpu, Gloo) from $PYTHON (default: the checkout's .venv) under torch.distributed.run.
# Both sides: OMP_NUM_THREADS=1 and one intra-op thread per rank, micro-batch 8 per rank, DeepSpeed's "Adam"
# (lr 1e-3, weight_decay 0.01, adam_w_mode true: decoupled decay, DeepSpeed's default for "Adam") and
# gradient_clipping 1.0 (DeepSpeed 0.19.8's default and ours; every config sets it explicitly all the same).
#
# Configurations (CONFIGS, default all): zero0 zero1 zero2 zero3 zero2_offload zero3_offload (configs/<name>.json,
# the same file for both sides) and ddp (plain torch DDP + torch.optim.AdamW, Python only: a reference row).
# Each configuration runs in a fresh pair of processes per side, so each VmHWM is that configuration's alone, and
# the runs are interleaved: round 1 runs every configuration once on both sides (which side goes first alternates
# by round), round 2 again, ... The table gives, per configuration, the median over rounds of each run's median
# step time (WARMUP untimed steps, then STEPS timed ones; a step is the slowest rank's forward + backward + step)
# and of the largest rank's VmHWM at the end of the run, with ours / DeepSpeed beside them; and the loss of the
# last step (averaged over ranks) on both sides with their relative difference.
#
# Same start, same data: bench_peer_ours --export_init writes our initial weights once, peer_ds.py reads them into
# its mirror of models/gpt.cc (peer_gpt.py); both sides make their batches with one integer generator. The losses
# must then agree to fp32 rounding: a relative difference above LOSS_BOUND (see peer_report.py for where it comes
# from) fails the run (exit 1) after the table is printed. The load average is printed before and after.
#
# MODEL=llama trains a tiny Hugging Face Llama instead (peer_llama.py: 12.6M parameters, grouped-query attention,
# llama3 rope scaling, seq 128), made once by transformers' save_pretrained; both sides load that one folder, DeepSpeed's
# with from_pretrained (inside zero.Init at stage 3, through HfDeepSpeedConfig, as HF Trainer does), ours with
# load_hf_weights. Default MODEL=gpt.
# Other knobs: MASTER_PORT (29841), NPROC (2), SEED (1234), PYTHON, LOSS_BOUND. SKIP_WITHOUT_DEEPSPEED=<code>: exit
# with <code> instead of 2 when $PYTHON cannot import deepspeed (the ctest uses 77, "skipped").
# First use on a machine: DeepSpeed JIT-builds its CPU ops (fused_adam for the ZeRO configurations, cpu_adam for
# offload, deepspeed_shm_comm at import; ninja and a C++ compiler, 1-3 minutes, cached in ~/.cache/torch_extensions).
# That happens here, before the first round, so no timed run pays for it.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=build/bin
if [[ $# -gt 0 ]]; then BIN=$1; shift; fi
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
NPROC=${NPROC:-2}
PORT=${MASTER_PORT:-29841}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-6}
WARMUP=${WARMUP:-2}
SEED=${SEED:-1234}
CONFIGS=${CONFIGS:-zero0 zero1 zero2 zero3 zero2_offload zero3_offload ddp}
MODEL=${MODEL:-gpt}
if [[ $MODEL != gpt && $MODEL != llama ]]; then
  echo "run_peer.sh: MODEL must be gpt or llama, got '$MODEL'" >&2
  exit 2
fi

for exe in "$BIN/deepspeed" "$BIN/bench_peer_ours"; do
  if [[ ! -x $exe ]]; then
    echo "run_peer.sh: $exe not found or not executable (pass the bin folder first)" >&2
    exit 2
  fi
done
for cfg in $CONFIGS; do
  if [[ $cfg != ddp && ! -f $HERE/configs/$cfg.json ]]; then
    echo "run_peer.sh: CONFIGS: no $HERE/configs/$cfg.json (known: ddp $(cd "$HERE/configs" && ls | sed 's/\.json$//' | tr '\n' ' '))" >&2
    exit 2
  fi
done
export OMP_NUM_THREADS=1 DS_ACCELERATOR=cpu
imports=deepspeed
[[ $MODEL == llama ]] && imports="deepspeed, transformers, accelerate"
if ! "$PYTHON" -c "import $imports" > /dev/null 2>&1; then
  echo "run_peer.sh: $PYTHON cannot import $imports (set PYTHON, or create .venv: requirements.txt)" >&2
  exit "${SKIP_WITHOUT_DEEPSPEED:-2}"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/peer.XXXXXX")
trap '[[ -n ${KEEP_WORK:-} ]] || rm -rf "$WORK"' EXIT
ROWS=$WORK/rows.txt
: > "$ROWS"

echo "peer benchmark: deepspeed-cpp vs DeepSpeed $("$PYTHON" -c 'import deepspeed; print(deepspeed.__version__)' 2> /dev/null)" \
  "(torch $("$PYTHON" -c 'import torch; print(torch.__version__)')), $NPROC ranks, $(getconf _NPROCESSORS_ONLN) cores, $ROUNDS round(s)" \
  "of $WARMUP + $STEPS steps; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "start: $(uptime)"

# DeepSpeed's JIT ops, once, before anything is timed (and not built by two ranks at once).
ops=""
for cfg in $CONFIGS; do
  case $cfg in
    ddp) ;;
    *_offload) ops="$ops CPUAdamBuilder" ;;
    *) ops="$ops FusedAdamBuilder" ;;
  esac
done
if [[ -n $ops ]]; then
  "$PYTHON" - $ops > "$WORK/jit.log" 2>&1 << 'PY' || { cat "$WORK/jit.log" >&2; exit 1; }
import sys
from deepspeed.accelerator import get_accelerator
for name in sorted(set(sys.argv[1:])):
    get_accelerator().create_op_builder(name).load()
PY
fi

# The starting weights both sides read: our GPT's initialisation, or transformers' Llama folder.
if [[ $MODEL == gpt ]]; then
  "$BIN/bench_peer_ours" --export_init "$WORK/init.safetensors" --seed "$SEED" > "$WORK/export.log" 2>&1 ||
    { cat "$WORK/export.log" >&2; exit 1; }
  MODEL_ARGS_OURS=() MODEL_ARGS_DS=(--init "$WORK/init.safetensors")
else
  "$PYTHON" "$HERE/peer_llama.py" "$WORK/llama" --seed "$SEED" > "$WORK/export.log" 2>&1 ||
    { cat "$WORK/export.log" >&2; exit 1; }
  MODEL_ARGS_OURS=(--model_dir "$WORK/llama") MODEL_ARGS_DS=(--model_dir "$WORK/llama")
fi
echo "model: $MODEL"

# run_side <ours|ds|ddp> <config>: one launch; its result lines go to $ROWS.
run_side() {
  local side=$1 cfg=$2 log="$WORK/$1.$2.log" config="$HERE/configs/$2.json"
  local common=(--label "$cfg" --steps "$STEPS" --warmup "$WARMUP" --seed "$SEED")
  case $side in
    ours)
      "$BIN/deepspeed" --num_procs "$NPROC" --master_port "$PORT" "$BIN/bench_peer_ours" \
        --deepspeed_config "$config" "${MODEL_ARGS_OURS[@]}" "${common[@]}" > "$log" 2>&1 || side_failed "$side" "$cfg" "$log" ;;
    ds | ddp)
      [[ $side == ddp ]] && config="$HERE/configs/zero0.json"  # its optimizer section only
      "$PYTHON" -m torch.distributed.run --nproc_per_node "$NPROC" --master_addr 127.0.0.1 --master_port "$PORT" \
        "$HERE/peer_ds.py" --deepspeed_config "$config" "${MODEL_ARGS_DS[@]}" "${common[@]}" \
        $([[ $side == ddp ]] && echo --ddp) > "$log" 2>&1 || side_failed "$side" "$cfg" "$log" ;;
  esac
  grep -ho 'peer_\(row\|optimizer\) .*' "$log" >> "$ROWS" || side_failed "$side" "$cfg" "$log"
}
side_failed() {
  echo "run_peer.sh: $1 $2 failed; the last lines of its log:" >&2
  tail -n 30 "$3" >&2
  exit 1
}

for ((round = 1; round <= ROUNDS; ++round)); do
  for cfg in $CONFIGS; do
    if [[ $cfg == ddp ]]; then
      run_side ddp ddp
    elif ((round % 2 == 1)); then
      run_side ours "$cfg"
      run_side ds "$cfg"
    else
      run_side ds "$cfg"
      run_side ours "$cfg"
    fi
  done
  echo "round $round done: $(uptime)"
done
echo "end: $(uptime)"
"$PYTHON" "$HERE/peer_report.py" "$ROWS" --configs $CONFIGS ${LOSS_BOUND:+--bound "$LOSS_BOUND"}
