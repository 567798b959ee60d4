#!/usr/bin/env bash
# A ZeRO-Infinity run (optimizer state and parameters swapped to NVMe files) leaves no swap file behind however it
# ends: killed with SIGKILL mid-training (no destructor runs), or failing with an error (a damaged checkpoint).
#   usage: train_gpt_nvme_exit_test.sh <bin-dir> <port>
set -uo pipefail
bin=$1 port=$2
work=$(mktemp -d)
log=$work/log
trap 'rm -rf "$work"' EXIT
nvme=$work/nvme
cat > "$work/config.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
 "zero_optimization": {"stage": 3, "sub_group_size": 4096,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$nvme"}}}
JSON
small=(--layers 2 --hidden 64 --heads 4 --seq-len 32)

fail() { echo "FAIL: $*"; echo "--- output ---"; cat "$log"; echo "--- $nvme ---"; find "$nvme" | head -20; exit 1; }
swap_files() { find "$nvme" -type f 2>/dev/null | wc -l; }

# Killed: SIGKILL to the launcher's whole process group once training runs.
setsid "$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" --deepspeed_config "$work/config.json" \
  "${small[@]}" --steps 100000 > "$log" 2>&1 &
pid=$!
deadline=$((SECONDS + 120))
until grep -q "step 2/" "$log" || ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
grep -q "step 2/" "$log" || { kill -9 -- "-$pid" 2>/dev/null; fail "the NVMe run did not start training"; }
kill -9 -- "-$pid" 2>/dev/null
wait "$pid" 2>/dev/null
for _ in $(seq 50); do pgrep -g "$pid" > /dev/null || break; sleep 0.1; done
[ -d "$nvme" ] || fail "the run made no swap directory (is it an NVMe run?)"
[ "$(swap_files)" = 0 ] || fail "SIGKILL left $(swap_files) swap file(s)"

# Failed: an error after the swap files exist (a checkpoint whose rank file is damaged).
sleep 1  # the killed ranks' port
ckpt=$work/ckpt
"$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" --deepspeed_config "$work/config.json" \
  "${small[@]}" --steps 1 --save_dir "$ckpt" > "$log" 2>&1 || fail "saving run exited with $?"
[ "$(swap_files)" = 0 ] || fail "a finished run left $(swap_files) swap file(s)"
f=$ckpt/global_step1/zero_pp_rank_0_mp_rank_00_optim_states.pt
size=$(stat -c %s "$f")
printf '\xff' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
"$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" --deepspeed_config "$work/config.json" \
  "${small[@]}" --steps 2 --load_dir "$ckpt" > "$log" 2>&1 && fail "a damaged checkpoint loaded"
grep -q "is corrupt: record" "$log" || fail "no checksum error"
[ "$(swap_files)" = 0 ] || fail "the failed run left $(swap_files) swap file(s)"
echo PASS
