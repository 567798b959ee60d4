#!/usr/bin/env bash
# Black-box tests of the example training program through the launcher, as a user runs it.
#   usage: train_gpt_test.sh <case> <bin-dir> <configs-dir> <port>
set -uo pipefail
case_name=$1 bin=$2 configs=$3 port=$4
small=(--layers 2 --hidden 64 --heads 4 --seq-len 32)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

fail() { echo "FAIL: $*"; echo "--- output ---"; cat "$log"; exit 1; }

run() {  # run <procs> <config> <extra args...>; output in $log, returns the launcher's status
  local procs=$1 config=$2
  shift 2
  "$bin/deepspeed" --num_procs "$procs" --master_port "$port" "$bin/train_gpt" \
    --deepspeed_config "$configs/$config" "${small[@]}" "$@" > "$log" 2>&1
}

# Two layouts of one training under Adam (ranks, micro-batching, stages, ep_size, ZeRO stage, a reshard) print
# final lines that differ by their reordered sums. Adam turns rounding differences in near-zero gradients into
# full-size updates, so no closed form holds; but the loss (a mean) and params_l2 (a norm over every parameter)
# average those per-element differences away: measured over these cases (layouts, pipeline, moe, zero3, reshard),
# every pair printed the same digits (6 decimals: 2e-7 relative on a loss of ~5). The bound, 1e-5 relative, leaves
# 50x that for the other SIMD level's paths (tests/common/tolerance.h's measured()); a wrong layout is off by
# 1e-3 or more.
export DS_LAYOUT_BOUND=1e-5

final_field() {  # final_field <name>: the value of <name>= in rank 0's final line
  grep -o "final step=.*" "$log" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

universal_resumes() {  # universal_resumes <config> <dir> <loss> <params_l2> "<procs> <args...>"...: each layout
  # loads <dir>'s universal checkpoint, resumes at step 3 and ends within DS_LAYOUT_BOUND of the uninterrupted run.
  local config=$1 dir=$2 want_loss=$3 want_l2=$4 layout
  shift 4
  for layout in "$@"; do
    set -- $layout
    run "$1" "$config" --steps 6 --load_dir "$dir" "${@:2}" || { rm -rf "$dir"; fail "universal load ($layout) exited with $?"; }
    grep -q "resumed at step 3" "$log" || { rm -rf "$dir"; fail "$layout did not resume at step 3"; }
    awk -v a="$want_loss" -v b="$(final_field loss)" -v c="$want_l2" -v d="$(final_field params_l2)" \
      'BEGIN { e = ENVIRON["DS_LAYOUT_BOUND"]; exit !(b != "" && (a - b) ^ 2 <= (e * a) ^ 2 && (c - d) ^ 2 <= (e * c) ^ 2) }' \
      || { rm -rf "$dir"; fail "$layout from the universal checkpoint ended at $(final_field loss) $(final_field params_l2), uninterrupted $want_loss $want_l2"; }
  done
}

split_layouts() {  # split_layouts <flag> <layout name> <config>: one model, one answer, split or not
  local flag=$1 name=$2 other=$3 layout
  declare -A loss l2
  # ranks, config, split size; the last is <config> split over 2 of 4 ranks (or 2 of 2 for a global batch of 8 at
  # micro 2), compared with its own plain 2-rank run.
  local wide=4
  [ "$other" = ckpt_stage1.json ] && wide=2
  local layouts=("1 micro8.json 1" "2 micro8.json 2" "4 micro8.json 4" "4 micro4.json 2" "$wide $other 2")
  for layout in "${layouts[@]}"; do
    set -- $layout
    run "$1" "$2" --steps 6 "$flag" "$3" || fail "layout $layout exited with $?"
    [ "$3" = 1 ] || grep -q "ranks ($name $3 x data parallel $(( $1 / $3 )))" "$log" || \
      fail "layout $layout: no '$name' layout line"
    loss[$layout]=$(final_field loss)
    l2[$layout]=$(final_field params_l2)
    echo "layout $layout: loss=${loss[$layout]} params_l2=${l2[$layout]}"
  done
  run 2 "$other" --steps 6 || fail "$other without $flag exited with $?"
  local args=()
  for layout in "${layouts[@]:0:4}"; do args+=("${loss[$layout]}"); done
  args+=("$(final_field loss)" "${loss[$wide $other 2]}")
  for layout in "${layouts[@]:0:4}"; do args+=("${l2[$layout]}"); done
  args+=("$(final_field params_l2)" "${l2[$wide $other 2]}")
  python3 - "${args[@]}" <<'PY' || fail "$name layouts disagree"
import os, sys
v = [float(x) for x in sys.argv[1:]]
losses, norms = v[:6], v[6:]
bound = float(os.environ["DS_LAYOUT_BOUND"])
for group in (losses, norms):
    for a, b in ((group[0], group[1]), (group[0], group[2]), (group[0], group[3]), (group[4], group[5])):
        assert abs(a - b) <= bound * abs(a), (losses, norms)
PY
}

case "$case_name" in
  layouts)
    # The same global batches whatever the layout: 1x8, 2 ranks x 4, 1 x (2 micro x 4 accumulation).
    declare -A loss l2
    for layout in "1 micro8.json" "2 micro4.json" "1 micro2_gas4.json"; do
      set -- $layout
      run "$1" "$2" --steps 6 || fail "layout $layout exited with $?"
      loss[$layout]=$(final_field loss)
      l2[$layout]=$(final_field params_l2)
      echo "layout $layout: loss=${loss[$layout]} params_l2=${l2[$layout]}"
    done
    python3 - "${loss[@]}" "${l2[@]}" <<'PY' || fail "layouts disagree"
import os, sys
v = [float(x) for x in sys.argv[1:]]
losses, norms = v[:3], v[3:]
for group in (losses, norms):
    for x in group[1:]:
        assert abs(x - group[0]) <= float(os.environ["DS_LAYOUT_BOUND"]) * abs(group[0]), (losses, norms)
PY
    ;;
  pipeline)
    # --pipe_stages: the same global batch of 8 through 1, 2 and 4 stages (alone and with data parallelism) trains
    # the same model: 1 stage x 1 rank, 1 stage x 2 ranks, 2 stages (4 micro-batches), 2 stages x 2 ranks, 4 stages.
    declare -A loss l2
    layouts=("1 micro8.json 1" "2 micro4.json 1" "2 micro2_gas4.json 2" "4 micro4.json 2" "4 micro2_gas4.json 4")
    for layout in "${layouts[@]}"; do
      set -- $layout
      run "$1" "$2" --steps 6 --pipe_stages "$3" || fail "layout $layout exited with $?"
      grep -q "pipeline of $3 stages" "$log" || fail "layout $layout: no pipeline of $3 stages"
      loss[$layout]=$(final_field loss)
      l2[$layout]=$(final_field params_l2)
      echo "layout $layout: loss=${loss[$layout]} params_l2=${l2[$layout]}"
    done
    args=()
    for layout in "${layouts[@]}"; do args+=("${loss[$layout]}"); done
    for layout in "${layouts[@]}"; do args+=("${l2[$layout]}"); done
    python3 - "${args[@]}" <<'PY' || fail "pipeline layouts disagree"
import os, sys
v = [float(x) for x in sys.argv[1:]]
n = len(v) // 2
losses, norms = v[:n], v[n:]
for group in (losses, norms):
    for x in group[1:]:
        assert abs(x - group[0]) <= float(os.environ["DS_LAYOUT_BOUND"]) * abs(group[0]), (losses, norms)
PY
    ;;
  pipeline_resume)
    # A pipeline run resumed from its checkpoint in new processes ends where the uninterrupted run ends.
    dir=$(mktemp -d)
    run 2 micro2_gas4.json --steps 6 --pipe_stages 2 || fail "uninterrupted run exited with $?"
    whole=$(final_field params_l2); whole_loss=$(final_field loss)
    run 2 micro2_gas4.json --steps 3 --pipe_stages 2 --save_dir "$dir" || { rm -rf "$dir"; fail "first half exited with $?"; }
    [ -f "$dir/global_step3/layer_00-model_states.pt" ] && [ -f "$dir/global_step3/mp_rank_01_model_states.pt" ] && \
      [ -f "$dir/global_step3/zero_pp_rank_0_mp_rank_01_optim_states.pt" ] || { ls -R "$dir"; rm -rf "$dir"; fail "pipeline checkpoint layout"; }
    run 2 micro2_gas4.json --steps 6 --pipe_stages 2 --load_dir "$dir" || { rm -rf "$dir"; fail "resumed half exited with $?"; }
    rm -rf "$dir"
    grep -q "resumed at step 3" "$log" || fail "did not resume at step 3"
    [ "$(final_field params_l2)" = "$whole" ] && [ "$(final_field loss)" = "$whole_loss" ] || \
      fail "resumed run ended at params_l2=$(final_field params_l2) loss=$(final_field loss), uninterrupted $whole $whole_loss"
    ;;
  pipeline_bad)
    run 2 micro4.json --steps 2 --pipe_stages 3 && fail "3 stages on 2 ranks must be refused"
    grep -q "world size 2 is not divisible by num_stages 3" "$log" || fail "no clear message for 3 stages on 2 ranks"
    run 2 zero3.json --steps 2 --pipe_stages 2 && fail "ZeRO stage 3 with a pipeline must be refused"
    grep -q "zero_optimization.stage 3 is not supported with pipeline parallelism" "$log" || fail "no clear message for stage 3"
    # A checkpoint of 2 stages does not load into 1 stage (the message names both partitions).
    dir=$(mktemp -d)
    run 2 micro2_gas4.json --steps 2 --pipe_stages 2 --save_dir "$dir" || fail "saving a pipeline checkpoint failed"
    run 2 micro4.json --steps 4 --pipe_stages 1 --load_dir "$dir" && { rm -rf "$dir"; fail "2-stage checkpoint loaded into 1 stage"; }
    rm -rf "$dir"
    grep -q "splits the layers as \[0,2,5\] (2 stages); this pipeline as \[0,5\]" "$log" || fail "no clear message for the stage count"
    ;;
  moe)
    # --moe_experts: experts split over 2 ranks (ep_size 2) train the same model as every expert on every rank
    # (ep_size 1), at ZeRO 0 and 2, top-2 gating with random token selection (the same draws on both layouts).
    for cfg in micro4.json ckpt_stage2.json; do
      run 2 "$cfg" --steps 6 --moe_experts 4 --top_k 2 --ep_size 1 || fail "$cfg ep_size 1 exited with $?"
      grep -q "train_gpt: .* parameters" "$log" || fail "no start line"
      loss1=$(final_field loss); l21=$(final_field params_l2)
      run 2 "$cfg" --steps 6 --moe_experts 4 --top_k 2 --ep_size 2 || fail "$cfg ep_size 2 exited with $?"
      loss2=$(final_field loss); l22=$(final_field params_l2)
      echo "$cfg: ep1 loss=$loss1 l2=$l21; ep2 loss=$loss2 l2=$l22"
      python3 - "$loss1" "$loss2" "$l21" "$l22" <<'PY' || fail "$cfg: ep_size 2 and 1 disagree"
import os, sys
a, b, c, d = (float(x) for x in sys.argv[1:])
bound = float(os.environ["DS_LAYOUT_BOUND"])
assert abs(a - b) <= bound * abs(a) and abs(c - d) <= bound * abs(c), (a, b, c, d)
PY
    done
    # Experts split over 2 ranks resume bit-exact in new processes; one file per expert, as DeepSpeed names them;
    # and the checkpoint loads at ep_size 1 (every expert on every rank) and trains on to the same point.
    dir=$(mktemp -d)
    run 2 micro4.json --steps 6 --moe_experts 4 --ep_size 2 || fail "uninterrupted MoE run exited with $?"
    whole=$(final_field params_l2); whole_loss=$(final_field loss)
    run 2 micro4.json --steps 3 --moe_experts 4 --ep_size 2 --save_dir "$dir" || { rm -rf "$dir"; fail "MoE save exited with $?"; }
    for e in 0 1 2 3; do
      [ -f "$dir/global_step3/layer_0_expert_${e}_mp_rank_00_model_states.pt" ] || { ls "$dir/global_step3"; rm -rf "$dir"; fail "no file for expert $e"; }
    done
    run 2 micro4.json --steps 6 --moe_experts 4 --ep_size 2 --load_dir "$dir" || { rm -rf "$dir"; fail "MoE resume exited with $?"; }
    [ "$(final_field params_l2)" = "$whole" ] && [ "$(final_field loss)" = "$whole_loss" ] || \
      { rm -rf "$dir"; fail "resumed MoE run ended at $(final_field params_l2) $(final_field loss), uninterrupted $whole $whole_loss"; }
    run 2 micro4.json --steps 6 --moe_experts 4 --ep_size 1 --load_dir "$dir" || { rm -rf "$dir"; fail "ep_size 1 resume exited with $?"; }
    rm -rf "$dir"
    python3 - "$(final_field params_l2)" "$whole" <<'PY' || fail "ep_size 1 resumed from an ep_size 2 checkpoint ends elsewhere"
import os, sys
a, b = (float(x) for x in sys.argv[1:])
assert abs(a - b) <= float(os.environ["DS_LAYOUT_BOUND"]) * abs(b), (a, b)
PY
    # PR-MoE: a pyramid of expert counts (2 then 4) with residual MoE trains and the loss falls.
    run 2 micro4.json --steps 20 --layers 4 --moe_experts 2,4 --ep_size 2 --moe_use_residual || fail "PR-MoE exited with $?"
    first=$(grep -o "step 2/20 ([0-9]*%) | loss [0-9.]*" "$log" | sed 's/.*loss //')
    last=$(final_field loss)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' || fail "PR-MoE loss did not fall: $first -> $last"
    ;;
  tensor_parallel)
    # --tp_size: the same global batch of 8 on one rank, split over 2 and 4 tensor ranks, and 2 tensor x 2 data
    # ranks, at ZeRO 0 and 1 (SGD and a clipped, scheduled AdamW), trains the same model.
    split_layouts --tp_size "tensor parallel" ckpt_stage1.json
    ;;
  pipeline_tensor_parallel)
    # 3D: --pipe_stages with --tp_size (2 stages x 2 tensor ranks; 1 stage x 2 tensor x 2 data) trains the model one
    # rank trains on the same global batch of 8; a 3D run resumed from its checkpoint (DeepSpeed's names: model-parallel
    # rank = stage x 2 + tensor rank, layer files per tensor rank) ends where the uninterrupted run ends, a
    # checkpoint of 2 tensor ranks is refused by a pipeline of 1, naming both sizes, and converts to universal.
    run 1 micro8.json --steps 6 || fail "plain run exited with $?"
    want_loss=$(final_field loss); want_l2=$(final_field params_l2)
    for layout in "micro2_gas4.json 2" "micro4.json 1"; do
      set -- $layout
      run 4 "$1" --steps 6 --pipe_stages "$2" --tp_size 2 || fail "layout $layout exited with $?"
      grep -q "2 tensor-parallel ranks" "$log" || fail "layout $layout: no tensor-parallel pipeline line"
      python3 - "$want_loss" "$(final_field loss)" "$want_l2" "$(final_field params_l2)" <<'PY' || fail "3D layout $layout disagrees"
import os, sys
a, b, c, d = (float(x) for x in sys.argv[1:])
bound = float(os.environ["DS_LAYOUT_BOUND"])
assert abs(a - b) <= bound * abs(a) and abs(c - d) <= bound * abs(c), (a, b, c, d)
PY
    done
    run 4 micro2_gas4.json --steps 6 --pipe_stages 2 --tp_size 2 || fail "uninterrupted 3D run exited with $?"
    whole=$(final_field params_l2); whole_loss=$(final_field loss)
    dir=$(mktemp -d)
    run 4 micro2_gas4.json --steps 3 --pipe_stages 2 --tp_size 2 --save_dir "$dir" || { rm -rf "$dir"; fail "3D first half exited with $?"; }
    for f in layer_00-model_01-model_states.pt layer_03-model_00-model_states.pt mp_rank_03_model_states.pt \
             zero_pp_rank_0_mp_rank_03_optim_states.pt; do
      [ -f "$dir/global_step3/$f" ] || { ls -R "$dir"; rm -rf "$dir"; fail "3D checkpoint layout: no $f"; }
    done
    run 4 micro2_gas4.json --steps 6 --pipe_stages 2 --tp_size 2 --load_dir "$dir" || { rm -rf "$dir"; fail "3D resumed half exited with $?"; }
    grep -q "resumed at step 3" "$log" || { rm -rf "$dir"; fail "3D run did not resume at step 3"; }
    [ "$(final_field params_l2)" = "$whole" ] && [ "$(final_field loss)" = "$whole_loss" ] || \
      { rm -rf "$dir"; fail "3D resumed run ended at params_l2=$(final_field params_l2) loss=$(final_field loss), uninterrupted $whole $whole_loss"; }
    run 2 micro2_gas4.json --steps 6 --pipe_stages 2 --load_dir "$dir" && { rm -rf "$dir"; fail "a 3D checkpoint loaded without tp"; }
    grep -q "was saved by a pipeline with 2 tensor-parallel ranks; this one has 1: load it at the same tensor size" "$log" || \
      { rm -rf "$dir"; fail "no clear message for the 3D checkpoint's tensor size"; }
    # Through the universal format (each stage's tensor slices joined) it continues on the same layout, at tensor
    # size 1 (2 stages) and on 1 stage of 2 tensor ranks, the same global batch, as the uninterrupted run ends.
    "$bin/ds_to_universal" --input_folder "$dir/global_step3" --output_folder "$dir/global_step3_universal" > "$log" 2>&1 || \
      { rm -rf "$dir"; fail "ds_to_universal failed on the 3D checkpoint"; }
    universal_resumes micro2_gas4_universal.json "$dir" "$whole_loss" "$whole" "4 --pipe_stages 2 --tp_size 2" \
      "2 --pipe_stages 2 --tp_size 1" "2 --pipe_stages 1 --tp_size 2"
    rm -rf "$dir"
    ;;
  tensor_parallel_resume)
    # A tensor-parallel run resumed from its checkpoint (one model file per tensor rank) ends where the uninterrupted
    # run ends; a checkpoint of 2 tensor ranks does not load into 1 directly, but does through the universal format.
    dir=$(mktemp -d)
    run 2 adam_micro2_gas2.json --steps 6 --tp_size 2 || fail "uninterrupted run exited with $?"
    whole=$(final_field params_l2); whole_loss=$(final_field loss)
    run 2 adam_micro2_gas2.json --steps 3 --tp_size 2 --save_dir "$dir" || { rm -rf "$dir"; fail "first half exited with $?"; }
    [ -f "$dir/global_step3/mp_rank_01_model_states.pt" ] && \
      [ -f "$dir/global_step3/zero_pp_rank_0_mp_rank_01_optim_states.pt" ] || { ls -R "$dir"; rm -rf "$dir"; fail "tensor-parallel checkpoint layout"; }
    run 2 adam_micro2_gas2.json --steps 6 --tp_size 2 --load_dir "$dir" || { rm -rf "$dir"; fail "resumed half exited with $?"; }
    grep -q "resumed at step 3" "$log" || { rm -rf "$dir"; fail "did not resume at step 3"; }
    [ "$(final_field params_l2)" = "$whole" ] && [ "$(final_field loss)" = "$whole_loss" ] || \
      { rm -rf "$dir"; fail "resumed run ended at params_l2=$(final_field params_l2) loss=$(final_field loss), uninterrupted $whole $whole_loss"; }
    run 2 adam_micro2_gas2.json --steps 6 --load_dir "$dir" && { rm -rf "$dir"; fail "a tp-2 checkpoint loaded without tp"; }
    grep -q "was saved with 2 tensor-parallel ranks (mp_world_size), this engine runs 1 (tensor_parallel.autotp_size); to change the size, convert it with ds_to_universal" "$log" || \
      { rm -rf "$dir"; fail "no clear message for the tensor-parallel size"; }
    # Through the universal format (every parameter whole, the tensor ranks' slices joined) it continues at tensor
    # size 1 (one rank) and 4 (four ranks), the same global batch, as the uninterrupted run ends.
    "$bin/ds_to_universal" --input_folder "$dir/global_step3" --output_folder "$dir/global_step3_universal" > "$log" 2>&1 || \
      { rm -rf "$dir"; fail "ds_to_universal failed"; }
    universal_resumes adam_micro2_gas2_universal.json "$dir" "$whole_loss" "$whole" "1 --tp_size 1" "4 --tp_size 4"
    rm -rf "$dir"
    ;;
  tensor_parallel_bad)
    run 2 micro4.json --steps 2 --tp_size 3 && fail "--tp_size 3 on 2 ranks must be refused"
    grep -q "tensor_parallel.autotp_size (3) must divide the world of 2 ranks" "$log" || fail "no clear message for tp 3"
    run 2 zero3.json --steps 2 --tp_size 2 && fail "tensor parallelism at ZeRO 3 must be refused"
    grep -q "works with zero_optimization.stage 0, 1 or 2" "$log" || fail "no clear message for stage 3"
    run 2 micro4.json --steps 2 --tp_size 2 --heads 1 && fail "1 head over 2 ranks must be refused"
    grep -q "needs heads (1) divisible by it" "$log" || fail "no clear message for the heads"
    ;;
  sequence_parallel)
    # --sp_size: each sequence split over 2 or 4 ranks (alone, and 2 x 2 data parallel) trains the model one rank
    # trains on the same global batch of 8, at ZeRO 0 and (zero3.json: AdamW, micro 4 = sp 2 x dp 2) ZeRO 3.
    split_layouts --sp_size "sequence parallel" zero3.json
    # ALST's tiling (--tiled_mlp_tokens, --tiled_loss_tokens; tiles that do not divide a rank's part) trains as the
    # untiled split run does.
    run 2 micro8.json --steps 6 --sp_size 2 || fail "untiled sp run exited with $?"
    want_loss=$(final_field loss); want_l2=$(final_field params_l2)
    run 2 micro8.json --steps 6 --sp_size 2 --tiled_mlp_tokens 5 --tiled_loss_tokens 7 || fail "tiled sp run exited with $?"
    python3 - "$want_loss" "$(final_field loss)" "$want_l2" "$(final_field params_l2)" <<'PY' || fail "tiled run disagrees"
import os, sys
a, b, c, d = (float(x) for x in sys.argv[1:])
bound = float(os.environ["DS_LAYOUT_BOUND"])
assert abs(a - b) <= bound * abs(a) and abs(c - d) <= bound * abs(c), (a, b, c, d)
PY
    ;;
  sequence_parallel_bad)
    run 2 micro4.json --steps 2 --sp_size 3 && fail "--sp_size 3 on 2 ranks must be refused"
    grep -q "sequence_parallel_size (3) must divide the world of 2 ranks" "$log" || fail "no clear message for sp 3"
    run 2 micro4.json --steps 2 --sp_size 2 --heads 1 && fail "1 head over 2 ranks must be refused"
    grep -q "sequence parallelism over 2 ranks needs heads (1) divisible by it" "$log" || fail "no clear message for the heads"
    run 2 micro4.json --steps 2 --sp_size 2 --seq-len 33 && fail "33 tokens over 2 ranks must be refused"
    grep -q "seq_len 33 must divide by the sequence-parallel size 2" "$log" || fail "no clear message for the sequence"
    run 2 micro4.json --steps 2 --sp_size 2 --tp_size 2 && fail "tp and sp together must be refused"
    grep -q "does not combine with sequence parallelism yet" "$log" || fail "no clear message for tp with sp"
    ;;
  moe_bad)
    run 2 micro4.json --steps 2 --moe_experts 6 --ep_size 3 && fail "ep_size 3 on 2 ranks must be refused"
    grep -q "ep_size 3 does not divide the world of 2 ranks" "$log" || fail "no clear message for ep_size 3"
    run 2 micro4.json --steps 2 --moe_experts 3 --ep_size 2 && fail "3 experts over 2 ranks must be refused"
    grep -q "num_experts (3) must be a positive multiple of ep_size (2)" "$log" || fail "no clear message for 3 experts"
    run 2 micro4.json --steps 2 --moe_experts 2,4,8 && fail "3 expert counts for 1 MoE block must be refused"
    grep -q "moe.num_experts has 3 counts" "$log" || fail "no clear message for the pyramid"
    run 2 zero3.json --steps 2 --moe_experts 4 --ep_size 2 && fail "MoE at ZeRO 3 must be refused"
    grep -q "works with stages 0-2" "$log" || fail "no clear message for stage 3"
    ;;
  loss_falls)
    run 2 micro4.json --steps 30 || fail "exited with $?"
    first=$(grep -o "step 2/30 ([0-9]*%) | loss [0-9.]*" "$log" | sed 's/.*loss //')
    last=$(final_field loss)
    [ -n "$first" ] && [ -n "$last" ] || fail "missing step log or final line"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "loss did not fall: $first -> $last"
    grep -Eq "^\[rank0\]: final step=30 loss=[0-9.]+ params_l2=[0-9.]+ tokens_per_s=[0-9.]+ peak_rss_mb=[0-9.]+$" \
      "$log" || fail "final line malformed"
    ;;
  breakdown)
    # WarmupDecayLR (total 4, warmup 2): after step 4 the schedule is at iteration 3, lr = 0.001 * (4 - 3) / (4 - 2).
    run 2 breakdown.json --steps 4 || fail "exited with $?"
    grep -Eq "step 4/4 \(100%\) \| loss [0-9.]+ \| lr \[0\.0005\] \| grad_norm [0-9.]+ \| [0-9.]+ samples/s" \
      "$log" || fail "no step log line"
    [ "$(grep -c 'samples/s' "$log")" -eq 4 ] || fail "expected one log line per step (steps_per_print 1) on rank 0 only"
    # The wall-clock breakdown: one aligned table per log line, backward split into compute and reduce.
    [ "$(grep -c 'time (ms), step [0-9]* *total *per step *share$' "$log")" -eq 4 ] || fail "no breakdown table"
    for row in "  forward" "  backward" "    compute" "    reduce \\(blocked\\)" "  step"; do
      [ "$(grep -Ec "^\[rank0\]: $row +[0-9.]+ +[0-9.]+ +[0-9.]+%$" "$log")" -eq 4 ] || fail "no '$row' row"
    done
    grep -q "stage 3" "$log" && fail "stage 3 rows at stage 0"
    # Backward's parts add up to it, and reduce is a part of it, in every table.
    awk '/^\[rank0\]:   backward / { b = $3 } /^\[rank0\]:     compute / { c = $3 }
         /^\[rank0\]:     reduce \(blocked\) / { r = $4; n++; if ((c + r - b) ^ 2 > 0.0121 || r > b) bad++ }
         END { exit !(n == 4 && bad == 0) }' "$log" || fail "compute + reduce != backward"
    # The pipeline engine's table: the batch split into compute, p2p and reduce, per log line.
    run 2 breakdown.json --steps 2 --pipe_stages 2 || fail "pipeline exited with $?"
    for row in "  batch" "    compute \(fwd, bwd, step\)" "    p2p \(incl. waits for neighbours\)" "    reduce"; do
      [ "$(grep -Ec "^\[rank0\]: $row +[0-9.]+ +[0-9.]+ +[0-9.]+%$" "$log")" -eq 2 ] || fail "no pipeline '$row' row"
    done
    run 2 zero3_breakdown.json --steps 2 || fail "stage 3 exited with $?"
    for row in "  stage 3 gather \(on demand, in fwd/bwd\)" "  stage 3 prefetch wait \(in fwd/bwd\)"; do
      grep -Eq "^\[rank0\]: $row +[0-9.]+ +[0-9.]+ +[0-9.]+%$" "$log" || fail "no '$row' row at stage 3"
    done
    # comms_logger: rank 0 prints the per-op summary once, at the end of training (stage 2 reduces to owners and
    # all-gathers the updated parameters).
    run 2 comms.json --steps 2 || fail "comms_logger run exited with $?"
    [ "$(grep -c 'Communication summary' "$log")" -eq 1 ] || fail "expected one communication summary"
    grep -q "^\[rank0\]: Communication summary of rank 0" "$log" || fail "the summary is rank 0's"
    grep -Eq "^\[rank0\]: Comm. Op +Message Size +Count" "$log" || fail "no summary header"
    for op in reduce all_gather_into_tensor; do
      grep -Eq "^\[rank0\]: $op total +[0-9.]+ [KMG]?i?B +[0-9]+ " "$log" || fail "no '$op total' row"
    done
    ;;
  progress)
    # Through a pseudo-terminal (script(1), from Debian's essential bsdutils) rank 0 redraws one bar line in place
    # and finishes it at the last step; piped, only the periodic step lines, with the ETA.
    cmd=$(printf '%q ' "$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" \
      --deepspeed_config "$configs/micro4.json" "${small[@]}" --steps 6)
    script -qefc "$cmd" /dev/null > "$log" 2>&1 || fail "exited with $? under a terminal"
    /usr/bin/python3 - "$log" <<'PY' || fail "no progress bar on a terminal"
import re, sys
out = open(sys.argv[1], "rb").read().decode(errors="replace")
frame = r"\[rank0\]: \[[#.]{24}\] +(\d)/6 +\d+% \| [0-9.]+ samples/s \| \d+ tokens/s \| step loss [0-9.]+ \(rank 0\) \| ETA [0-9a-z?]+\x1b\[K"
redrawn = re.findall(frame + r"\r(?!\n)", out)  # frames that stay on their line
final = re.findall(frame + r"\r\n", out)  # the terminal turns the last frame's "\n" into "\r\n"
assert redrawn, "no frame redrawn in place"
assert final == ["6"], f"the bar must end once, at step 6: {final}"
assert "ETA ?" in out and "6/6 100%" in out
PY
    run 2 micro4.json --steps 6 || fail "exited with $?"
    grep -q $'\r' "$log" && fail "piped output must not draw a bar"
    grep -Eq "step 6/6 \(100%\) \| .* tokens/s \| ETA 0s$" "$log" || fail "no ETA in the plain step lines"
    grep -Eq "step 2/6 \(33%\) \| .* \| ETA [0-9]+s$" "$log" || fail "no ETA at step 2"
    ;;
  unsupported_feature)
    run 1 unsupported.json --steps 2 && fail "sparse gradients must be rejected until they are implemented"
    grep -q "train_gpt: $configs/unsupported.json: sparse_gradients: sparse gradient all-reduce .*not implemented" "$log" ||
      fail "unclear rejection"
    ;;
  zero3)
    # Stage 3 (blocks as units, built under zero::Init) trains the same numbers as stage 0 on 2 ranks.
    run 2 micro4.json --steps 6 || fail "stage 0 exited with $?"
    loss0=$(final_field loss) l20=$(final_field params_l2)
    run 2 zero3.json --steps 6 || fail "stage 3 exited with $?"
    loss3=$(final_field loss) l23=$(final_field params_l2)
    echo "stage 0: loss=$loss0 params_l2=$l20; stage 3: loss=$loss3 params_l2=$l23"
    awk -v a="$loss0" -v b="$loss3" -v c="$l20" -v d="$l23" \
      'BEGIN { e = ENVIRON["DS_LAYOUT_BOUND"]; exit !(a != "" && (a - b) ^ 2 <= (e * a) ^ 2 && (c - d) ^ 2 <= (e * c) ^ 2) }' \
      || fail "stage 3 differs from stage 0"
    ;;
  config_typo)
    # A misspelt top-level key: DeepSpeed goes on past it, so do we, with one warning naming the file, the key and
    # the key it may have meant (issue 56).
    run 1 typo.json --steps 2 || fail "a top-level typo is a warning, as in DeepSpeed"
    grep -q "deepspeed: warning: $configs/typo.json: gradient_clippin: unknown key, ignored as DeepSpeed ignores it (did you mean 'gradient_clipping'?)" "$log" \
      || fail "no warning naming the file, the key and the suggestion"
    # Inside a section DeepSpeed validates (zero_optimization) a typo is refused, naming the file.
    zerotypo=$(mktemp --suffix=.json)
    trap 'rm -f "$log" "$zerotypo"' EXIT
    echo '{"train_batch_size": 8, "zero_optimization": {"stage": 1, "reduce_bucket_sise": 1000}}' > "$zerotypo"
    run 1 micro8.json --steps 2 --deepspeed_config "$zerotypo" && fail "a misspelt zero_optimization key must be rejected"
    grep -q "train_gpt: $zerotypo: zero_optimization.reduce_bucket_sise: unknown key (did you mean 'reduce_bucket_size'?)" "$log" \
      || fail "the key's error should name the file and suggest the key"
    # What initialize() refuses names the file too: here a batch that overflows 64 bits at 2 ranks (issue 52; it used
    # to resolve to train_batch_size -2 and fail later in a std::vector).
    huge=$(mktemp --suffix=.json)
    trap 'rm -f "$log" "$zerotypo" "$huge"' EXIT
    sed 's/"train_micro_batch_size_per_gpu": *[0-9]*/"train_micro_batch_size_per_gpu": 9223372036854775807/' \
      "$configs/micro8.json" > "$huge"
    run 2 micro8.json --steps 2 --deepspeed_config "$huge" && fail "an overflowing batch must be rejected"
    grep -q "train_gpt: $huge: train_micro_batch_size_per_gpu 9223372036854775807 \* gradient_accumulation_steps 1 \* world size 2 overflows a 64-bit integer" "$log" \
      || fail "the overflow should be one line naming the file and the keys"
    ;;
  bad_cli)
    # Bounds are one readable line naming the flag (CLI11's own checks print a 309-digit maximum).
    run 1 micro8.json --steps 0 && fail "--steps 0 must be rejected"
    grep -q -- "--steps: must be >= 1, got 0" "$log" || fail "the error should say --steps must be >= 1"
    run 1 micro8.json --seq-len 0 && fail "--seq-len 0 must be rejected"
    grep -q -- "--seq-len: must be >= 1, got 0" "$log" || fail "the error should say --seq-len must be >= 1"
    run 1 micro8.json --vocab 3 && fail "--vocab 3 must be rejected"
    grep -q -- "--vocab: must be in \[256, 1048576\], got 3" "$log" || fail "the error should give --vocab's range"
    grep -Eq "[0-9]{20}" "$log" && fail "a bound printed in full"
    # An unknown flag is reported as such, even when the config is missing too.
    "$bin/deepspeed" --num_procs 1 --master_port "$port" "$bin/train_gpt" --bogus > "$log" 2>&1 && fail "--bogus accepted"
    grep -q "The following argument was not expected: --bogus" "$log" || fail "--bogus not named"
    grep -q "deepspeed_config is required" "$log" && fail "reported the missing config instead of --bogus"
    "$bin/deepspeed" --num_procs 1 --master_port "$port" "$bin/train_gpt" --steps 2 > "$log" 2>&1 && fail "no config accepted"
    grep -q -- "--deepspeed_config is required" "$log" || fail "the missing config not named"
    ;;
  busy_port)
    # MASTER_PORT taken by another program: rank 0 says so in one line, without c10d's glog lines before it.
    python3 - "$port" "$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" \
      --deepspeed_config "$configs/micro4.json" "${small[@]}" --steps 2 > "$log" 2>&1 <<'PY' && fail "ran on a busy port"
import socket, subprocess, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen()  # held by this process while the launcher runs (subprocess closes it in the child)
sys.exit(subprocess.call(sys.argv[2:]))
PY
    grep -q "could not host the rendezvous store on .*:$port (MASTER_ADDR/MASTER_PORT): port $port is already in use" "$log" \
      || fail "no clear busy-port line"
    grep -Eq "socket\.cpp|\[c10d\]|^\[rank[0-9]\]: [WE][0-9]{4} " "$log" && fail "c10d's glog lines printed"
    ;;
  concurrent_start)
    # Issue 52: two jobs started in the same instant on one --master_port. The loser's rank 0 cannot listen on it,
    # but its rank 1 reached the winner's rendezvous store and joined its world, which then died a few dozen steps
    # later ("Connection reset by peer"): 7 of 16 tries lost both jobs. Now only ranks of the job that hosts the store
    # join it. Each round: at least one job finishes with the reference line; a job that does not fails in one line
    # saying the port is another job's. One process per rank, a tiny model, few steps: the rounds cost seconds each.
    job=(--deepspeed_config "$configs/micro4.json" "${small[@]}" --layers 1 --steps 30)
    run 2 micro4.json "${job[@]:2}" || fail "reference run exited with $?"
    want=$(grep -o "final step=30 loss=[^ ]* params_l2=[^ ]*" "$log")
    [ -n "$want" ] || fail "no reference line"
    a=$(mktemp) b=$(mktemp)
    trap 'rm -f "$log" "$a" "$b"' EXIT
    won=0
    check_job() {  # check_job <status> <output>: counts a win in $won; a failure must be a clean port refusal
      if [ "$1" = 0 ]; then
        [ "$(grep -o "final step=30 loss=[^ ]* params_l2=[^ ]*" "$2")" = "$want" ] || { cat "$2"; fail "round $round: a job finished off the reference '$want'"; }
        won=$((won + 1))
      else
        grep -Eq "port $port is already in use|of another job \('[0-9a-f]{32}'\): port $port is taken by another job" "$2" \
          || { cat "$2"; fail "round $round: a job failed (status $1) without saying the port is taken"; }
      fi
    }
    for round in $(seq 1 12); do
      "$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" "${job[@]}" > "$a" 2>&1 &
      pa=$!
      "$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" "${job[@]}" > "$b" 2>&1 &
      pb=$!
      wait $pa; sa=$?
      wait $pb; sb=$?
      won=0
      check_job $sa "$a"
      check_job $sb "$b"
      echo "round $round: statuses $sa $sb, $won finished"
      [ "$won" -ge 1 ] || fail "round $round: both jobs failed"
    done
    # The same collision made certain: a rank of another job (its own DS_JOB_ID) joins the job's port by hand. It is
    # refused in one line naming both jobs and set nothing the job reads: the job still ends on its reference. (That
    # job runs 150 steps, so the intruder, started first, surely reaches its store while it runs.)
    run 2 micro4.json "${job[@]:2}" --steps 150 || fail "the long reference run exited with $?"
    want150=$(grep -o "final step=150 loss=[^ ]* params_l2=[^ ]*" "$log")
    DS_JOB_ID=intruder RANK=1 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DS_COMM_TIMEOUT=60 \
      "$bin/train_gpt" "${job[@]}" > "$b" 2>&1 &
    pb=$!
    run 2 micro4.json "${job[@]:2}" --steps 150; sa=$?
    wait $pb; sb=$?
    [ "$sa" = 0 ] && [ -n "$want150" ] && [ "$(grep -o "final step=150 loss=[^ ]* params_l2=[^ ]*" "$log")" = "$want150" ] \
      || fail "the job beside the intruder: status $sa, '$(grep -o "final step=.*" "$log")', want '$want150'"
    [ "$sb" != 0 ] || { cat "$b"; fail "the intruding rank ran"; }
    grep -Eq "rank 1 of job 'intruder' \(DS_JOB_ID\) reached the rendezvous store at 127.0.0.1:$port \(MASTER_ADDR/MASTER_PORT\) of another job \('[0-9a-f]{32}'\)" "$b" \
      || { cat "$b"; fail "the intruder was not refused in one line naming both jobs"; }
    ;;
  resume)
    # New processes resume bit-exactly: 6 steps straight == 3 steps, save, 3 more from --load_dir (stages 0-3).
    ckpt=$(mktemp -d)
    trap 'rm -f "$log"; rm -rf "$ckpt"' EXIT
    for stage in 0 1 2 3; do
      run 2 ckpt_stage$stage.json --steps 6 --save_dir "$ckpt/straight$stage" \
        || fail "stage $stage straight run exited with $?"
      want=$(grep -o "final step=6 loss=[^ ]* params_l2=[^ ]*" "$log")
      run 2 ckpt_stage$stage.json --steps 3 --save_dir "$ckpt/s$stage" || fail "stage $stage save run exited with $?"
      run 2 ckpt_stage$stage.json --steps 6 --load_dir "$ckpt/s$stage" --save_dir "$ckpt/s$stage" \
        || fail "stage $stage resumed run exited with $?"
      grep -q "resumed at step 3" "$log" || fail "stage $stage: no resume message"
      got=$(grep -o "final step=6 loss=[^ ]* params_l2=[^ ]*" "$log")
      echo "stage $stage: straight '$want', resumed '$got'"
      [ -n "$want" ] && [ "$want" = "$got" ] || fail "stage $stage: the resumed run differs from the straight one"
      [ "$(cat "$ckpt/s$stage/latest")" = global_step6 ] || fail "latest should name global_step6"
      # Bit for bit: the fp32 weights of both runs' final checkpoints, merged by ds_to_fp32.
      "$bin/ds_to_fp32" "$ckpt/straight$stage" "$ckpt/a.safetensors" > /dev/null || fail "ds_to_fp32 failed"
      "$bin/ds_to_fp32" "$ckpt/s$stage" "$ckpt/b.safetensors" > /dev/null || fail "ds_to_fp32 failed"
      python3 - "$ckpt/a.safetensors" "$ckpt/b.safetensors" <<'PY' || fail "stage $stage: resumed weights differ in some bit"
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)  # names the run and tag, which differ
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys() and len(a) > 0, (sorted(a), sorted(b))
bad = [k for k in a if a[k] != b[k]]
assert not bad, bad
PY
    done
    # --save_interval saves along the way.
    run 1 ckpt_stage1.json --steps 4 --save_dir "$ckpt/every2" --save_interval 2 || fail "interval run exited with $?"
    [ -f "$ckpt/every2/global_step2/mp_rank_00_model_states.pt" ] && [ -f "$ckpt/every2/global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt" ] \
      || fail "expected checkpoints at steps 2 and 4"
    # Resumed at --steps: nothing to train, and the final line says so instead of loss=nan tokens_per_s=0.0 (issue 52).
    run 1 ckpt_stage1.json --steps 4 --load_dir "$ckpt/every2" || fail "a resume at --steps exited with $?"
    grep -q "final step=4 params_l2=[0-9.]* peak_rss_mb=[0-9.]* (no step trained: resumed at step 4, at or past --steps)" "$log" \
      || fail "a resume at --steps should say no step was trained"
    grep -Eq "nan|tokens_per_s=0" "$log" && fail "a resume at --steps printed a loss or a throughput"
    ;;
  reshard)
    # A checkpoint of N ranks (and another stage) continues on M ranks with the same numbers, up to reduction order.
    ckpt=$(mktemp -d)
    trap 'rm -f "$log"; rm -rf "$ckpt"' EXIT
    run 2 ckpt_stage1.json --steps 6 || fail "reference run exited with $?"
    ref_loss=$(final_field loss) ref_l2=$(final_field params_l2)
    for move in "4 1 2 1" "2 1 4 1" "2 1 1 1" "2 3 1 1"; do
      set -- $move  # save ranks, save stage, load ranks, load stage
      dir="$ckpt/$1x$2-$3x$4"
      run "$1" ckpt_stage$2.json --steps 3 --save_dir "$dir" || fail "$move: save run exited with $?"
      run "$3" ckpt_stage$4.json --steps 6 --load_dir "$dir" || fail "$move: resumed run exited with $?"
      loss=$(final_field loss) l2=$(final_field params_l2)
      echo "ranks x stage $1x$2 -> $3x$4: loss=$loss params_l2=$l2 (reference $ref_loss $ref_l2)"
      awk -v a="$ref_loss" -v b="$loss" -v c="$ref_l2" -v d="$l2" \
        'BEGIN { e = ENVIRON["DS_LAYOUT_BOUND"]; exit !(b != "" && (a - b) ^ 2 <= (e * a) ^ 2 && (c - d) ^ 2 <= (e * c) ^ 2) }' \
        || fail "$move: resharded run differs from the reference"
    done
    ;;
  python_interop)
    # Python's torch.load (the torch of the project's .venv, installed by scripts/setup.sh) reads an engine
    # checkpoint, with its default weights_only=True: nothing in our files needs unpickling of arbitrary classes.
    ckpt=$(mktemp -d)
    trap 'rm -f "$log"; rm -rf "$ckpt"' EXIT
    "$DS_PYTHON" -c "import torch" 2>/dev/null || fail "$DS_PYTHON cannot import torch: run scripts/setup.sh"
    run 2 ckpt_stage1.json --steps 2 --save_dir "$ckpt" || fail "save run exited with $?"
    "$DS_PYTHON" - "$ckpt" > "$log" 2>&1 <<'PY' || fail "torch.load could not read the checkpoint"
import sys, torch
d = sys.argv[1]
tag = open(d + "/latest").read().strip()
assert tag == "global_step2", tag
m = torch.load(f"{d}/{tag}/mp_rank_00_model_states.pt")
assert m["global_steps"] == 2 and m["dp_world_size"] == 2 and m["zero_stage"] == 1, m.keys()
assert m["lr_scheduler"]["last_batch_iteration"] == 1, m["lr_scheduler"]
assert m["client_state"]["data_step"] == 2
module = m["module"]
shapes = {k: tuple(v) for g in m["param_shapes"] for k, v in g.items()}
assert shapes and all(tuple(module[k].shape) == s for k, s in shapes.items())
total = 0
for r in range(2):
    o = torch.load(f"{d}/{tag}/zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    assert o["dp_rank"] == r and o["partition_count"] == 2
    osd = o["optimizer_state_dict"]
    assert osd["step"] == 2 and osd["state_names"] == ["exp_avg", "exp_avg_sq"]
    for g, flat in enumerate(o["fp32_flat_groups"]):
        assert flat.dtype == torch.float32 and osd["state"][g]["exp_avg"].shape == flat.shape
        for s in o["param_slices"][g]:
            want = module[s["name"]].float().flatten()[s["begin"]:s["end"]]
            assert torch.equal(flat[s["offset"]:s["offset"] + s["end"] - s["begin"]], want), s["name"]
            total += s["end"] - s["begin"]
assert total == sum(torch.Size(s).numel() for s in shapes.values()), total
print("ok", len(shapes), "parameters,", total, "elements")
PY
    cat "$log"
    ;;
  kill_during_save)
    # SIGKILL a 2-rank run while it writes a checkpoint: `latest` must still name a complete checkpoint, and the
    # run resumes from it. (The kill lands as soon as the new tag's directory appears, i.e. inside the save.)
    ckpt=$(mktemp -d)
    trap 'rm -f "$log"; rm -rf "$ckpt"' EXIT
    big=(--layers 4 --hidden 256 --heads 4 --seq-len 32)
    setsid "$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" \
      --deepspeed_config "$configs/ckpt_stage1.json" "${big[@]}" --steps 6 --save_dir "$ckpt" --save_interval 1 \
      > "$log" 2>&1 &
    pid=$!
    deadline=$((SECONDS + 120))
    while [ ! -d "$ckpt/global_step3" ] && kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do :; done
    kill -9 -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    sleep 1  # let the killed ranks' sockets close before the port is reused
    [ -d "$ckpt/global_step3" ] || fail "the run never reached its third save"
    echo "after the kill: latest=$(cat "$ckpt/latest"); global_step3 holds: $(ls "$ckpt/global_step3" | tr '\n' ' ')"
    latest=$(cat "$ckpt/latest")
    case "$latest" in global_step[123]) ;; *) fail "latest names '$latest'" ;; esac
    for f in "$ckpt/$latest"/*; do case "$f" in *.tmp.*) fail "latest's directory holds a temporary $f" ;; esac; done
    run 2 ckpt_stage1.json "${big[@]}" --steps 6 --load_dir "$ckpt" || fail "resuming after the kill exited with $?"
    grep -q "resumed at step ${latest#global_step}" "$log" || fail "did not resume from $latest"
    grep -q "final step=6" "$log" || fail "the resumed run did not finish"
    ;;
  bad_checkpoint)
    ckpt=$(mktemp -d)
    trap 'rm -f "$log"; rm -rf "$ckpt"' EXIT
    run 1 ckpt_stage1.json --steps 2 --load_dir "$ckpt/none" && fail "a missing checkpoint must be an error"
    grep -q "train_gpt: --load_dir $ckpt/none: no checkpoint to resume from" "$log" || fail "unclear missing-checkpoint error"
    run 1 ckpt_stage1.json --steps 2 --save_interval 1 && fail "--save_interval without --save_dir must be rejected"
    grep -q "save_interval requires --save_dir" "$log" || fail "unclear --save_interval error"
    run 1 ckpt_stage1.json --steps 2 --save_dir "$ckpt/ok" || fail "save run exited with $?"
    # Garbage in `latest` (issue 52: it was echoed raw inside a "file is missing" message): named as latest's fault,
    # escaped, in one line.
    printf 'glob\033[2Jal\nstep' > "$ckpt/ok/latest"
    run 1 ckpt_stage1.json --steps 4 --load_dir "$ckpt/ok" && fail "garbage in latest must be refused"
    grep -q "$ckpt/ok/latest does not hold a checkpoint tag (it holds a control character): 'glob\\\\x1b\[2Jal\\\\x0astep'" "$log" \
      || fail "garbage in latest should be named as such, escaped"
    grep -q $'\033' "$log" && fail "a control byte from latest reached the output"
    echo global_step2 > "$ckpt/ok/latest"
    : > "$ckpt/ok/global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt"
    run 1 ckpt_stage1.json --steps 4 --load_dir "$ckpt/ok" && fail "an empty rank file must be refused"
    grep -q "zero_pp_rank_0_mp_rank_00_optim_states.pt" "$log" || fail "the error should name the broken file"
    ;;
  pipeline_engine)
    # One model, one answer, whichever engine runs it: plain train_gpt and --pipe_stages P train the GPT of the same
    # seed on the same global batch of 8 (12 steps, 4 blocks, 2 heads; issue 21's repro). Final lines are compared by
    # the arithmetic each pair shares.
    gpt=(--steps 12 --layers 4 --heads 2)
    # Adam at 1 rank (2 x 4 accumulation) and at 2 ranks (2 x 2 each): the pipeline at one stage runs the plain
    # engine's forward, backward, accumulation, reduction (a sum of two is the same either way) and fused Adam in the
    # same order: the same params_l2 as printed. The loss line is the same micro-batch losses averaged in double by
    # train_gpt and in fp32 by the pipeline: within (gas + ranks) x fp32 epsilon relative, plus the printed 1e-6.
    for layout in "1 adam_micro2_gas4.json" "2 adam_micro2_gas2.json"; do
      set -- $layout
      run "$1" "$2" "${gpt[@]}" || fail "plain $layout exited with $?"
      plain_l2=$(final_field params_l2); plain_loss=$(final_field loss)
      run "$1" "$2" "${gpt[@]}" --pipe_stages 1 || fail "--pipe_stages 1 $layout exited with $?"
      grep -q "pipeline of 1 stages" "$log" || fail "layout $layout: no pipeline"
      echo "adam $layout: plain loss=$plain_loss params_l2=$plain_l2; 1 stage loss=$(final_field loss) params_l2=$(final_field params_l2)"
      [ "$(final_field params_l2)" = "$plain_l2" ] || fail "adam $layout: --pipe_stages 1 params_l2 $(final_field params_l2), plain $plain_l2"
      python3 - "$(final_field loss)" "$plain_loss" <<'PY' || fail "adam $layout: --pipe_stages 1 loss differs from plain"
import os, sys
a, b = (float(x) for x in sys.argv[1:])
assert abs(a - b) <= 6 * 2**-23 * abs(b) + 1e-6, (a, b)
PY
    done
    # SGD over 1, 2 and 4 stages (2 replicas of 2 stages at 4 ranks) against the plain engine at 1 rank: the same
    # gradients summed in another order (the tied embedding's head and input parts on two stages, replicas
    # all-reduced): each sum of up to 2 x 8 micro-batch terms is within 16 x fp32 epsilon relative, and SGD adds those
    # errors up over the 12 steps, so loss and params_l2 agree to 16 x 12 x 2^-23 = 2.3e-5 relative (the printed
    # digits are finer). A gradient averaged over the wrong count or another model is off by far more.
    run 1 sgd_micro2_gas4.json "${gpt[@]}" || fail "plain sgd exited with $?"
    plain_l2=$(final_field params_l2); plain_loss=$(final_field loss)
    echo "sgd plain: loss=$plain_loss params_l2=$plain_l2"
    for layout in "1 sgd_micro2_gas4.json 1" "2 sgd_micro2_gas4.json 2" "4 sgd_micro2_gas2.json 2" "4 sgd_micro2_gas4.json 4"; do
      set -- $layout
      run "$1" "$2" "${gpt[@]}" --pipe_stages "$3" || fail "sgd $layout exited with $?"
      grep -q "pipeline of $3 stages" "$log" || fail "layout $layout: no pipeline of $3 stages"
      echo "sgd $layout: loss=$(final_field loss) params_l2=$(final_field params_l2)"
      python3 - "$(final_field loss)" "$plain_loss" "$(final_field params_l2)" "$plain_l2" <<'PY' || fail "sgd $layout differs from the plain engine"
import os, sys
loss, plain_loss, l2, plain_l2 = (float(x) for x in sys.argv[1:])
bound = 16 * 12 * 2**-23
assert abs(loss - plain_loss) <= bound * abs(plain_loss) and abs(l2 - plain_l2) <= bound * abs(plain_l2), sys.argv[1:]
PY
    done
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
