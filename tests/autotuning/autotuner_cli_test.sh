#!/usr/bin/env bash
# The autotuner end to end through the real `deepspeed` command, on 2 ranks of a stand-in program
# (fake_trainer.py) whose metric and failures follow a known rule; and on the GPT example.
#   usage: autotuner_cli_test.sh <case> <bin-dir> <port>
set -uo pipefail
case_name=$1 bin=$2 port=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
log=$work/log

fail() { echo "FAIL: $*"; echo "--- output ---"; cat "$log"; exit 1; }

# Processes matching $1 that run in this test's directory: other tests (ctest -j) run the same
# programs at the same time.
ours() {
  for p in $(pgrep -f "$1"); do
    [ "$(readlink /proc/$p/cwd 2> /dev/null)" = "$work" ] && echo "$p"
  done
}

case "$case_name" in
  fake)
    # Grid search over stages 0-3 x micro batches 1, 2, 4, 8: the best is stage 3, micro batch 8;
    # the crash (stage 1), out-of-memory (z2 mbs 8) and timeout (z0 mbs 4) trials are recorded and
    # the search goes on; `run` then trains with the winner, its batch flag set by arg_mappings.
    cat > ds.json << 'JSON'
{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
 "autotuning": {"enabled": true, "fast": true, "min_train_micro_batch_size_per_gpu": 1,
                "max_train_micro_batch_size_per_gpu": 8, "num_tuning_micro_batch_sizes": 4,
                "tuner_early_stopping": 100, "exps_dir": "exps", "results_dir": "results",
                "arg_mappings": {"train_micro_batch_size_per_gpu": "--batch"}}}
JSON
    DS_AUTOTUNING_TRIAL_TIMEOUT=3 "$bin/deepspeed" --num_procs 2 --master_port "$port" --autotuning run \
      "$here/fake_trainer.py" --deepspeed_config ds.json --batch 1 > "$log" 2>&1 || fail "exit code $?"
    cat "$log"
    grep -q "autotuning: 16 candidates (0 pruned" "$log" || fail "search space"
    for row in "z0_mbs4_gas1 .*timeout" "z1_mbs1_gas1 .*failed: exit code 3" "z2_mbs8_gas1 .*out_of_memory" \
               "^\\* *| z3_mbs8_gas1 .*38 "; do
      grep -q "$row" results/summary.txt || fail "summary.txt has no row matching '$row'"
    done
    [ "$(grep -cE '\| ok *$' results/summary.txt)" = 10 ] || fail "want 10 successful trials (16 - timeout - 4 crashes - oom)"
    python3 - << 'PY' || fail "ds_config_optimal.json"
import json
c = json.load(open("results/ds_config_optimal.json"))
assert c["zero_optimization"]["stage"] == 3 and c["train_micro_batch_size_per_gpu"] == 8, c
assert c["train_batch_size"] == 16 and c["optimizer"]["type"] == "Adam", c
assert not c["autotuning"]["enabled"] and "metric_path" not in c["autotuning"], c
PY
    grep -q -- "--batch 8" results/cmd_optimal.txt || fail "cmd_optimal.txt lacks the mapped batch"
    [ "$(grep -c 'final run stage=3 mbs=8 autotuning=False' "$log")" = 2 ] || fail "the final run did not use the winner"
    [ -n "$(ours "$here/fake_trainer.py")" ] && fail "trial processes left running"
    ;;
  tune_only)
    # `tune` stops after writing the results; a fixed stage limits the search to it.
    cat > ds.json << 'JSON'
{"train_batch_size": 8, "zero_optimization": {"stage": 3},
 "autotuning": {"enabled": true, "max_train_micro_batch_size_per_gpu": 4,
                "model_info": {"num_params": 1000}}}
JSON
    "$bin/deepspeed" --num_procs 2 --master_port "$port" --autotuning tune "$here/fake_trainer.py" \
      --deepspeed_config=ds.json > "$log" 2>&1 || fail "exit code $?"
    cat "$log"
    grep -q "autotuning: 3 candidates" "$log" || fail "want stage 3 x micro batches 1, 2, 4"
    grep -q "z3_mbs4_gas1" autotuning_results/summary.txt && grep -q "z3_mbs1_gas4" autotuning_results/summary.txt ||
      fail "rows (default results_dir autotuning_results)"
    grep -q "measuring the model" "$log" && fail "model_info.num_params given: no profiling run"
    grep -q "final run" "$log" && fail "tune must not run the job"
    python3 -c "import json; c = json.load(open('autotuning_results/ds_config_optimal.json')); assert c['train_micro_batch_size_per_gpu'] == 4 and c['gradient_accumulation_steps'] == 1, c" ||
      fail "default results_dir"
    ;;
  pruning)
    # 1e6 fp32 parameters on 2 ranks: model states need 16 MB at stage 0, 12 MB at stage 1, more
    # than 10 MB at stage 2 (plus its reduce buckets) and 8 MB at stage 3 (memory_estimator.h), so
    # 9 MiB per rank leaves stage 3 alone to run; overwrite false reuses what a run measured.
    cat > ds.json << 'JSON'
{"train_micro_batch_size_per_gpu": 1,
 "autotuning": {"enabled": true, "max_train_micro_batch_size_per_gpu": 2, "overwrite": false,
                "model_info": {"num_params": 1000000}}}
JSON
    for attempt in 1 2; do
      DS_AUTOTUNING_MEMORY_PER_RANK=9M "$bin/deepspeed" --num_procs 2 --master_port "$port" --autotuning tune \
        "$here/fake_trainer.py" --deepspeed_config ds.json > "$log" 2>&1 || fail "exit code $?"
      cat "$log"
      grep -q "autotuning: 2 candidates (6 pruned: model states above 9.00 MiB per rank" "$log" || fail "pruning"
      for stage in 0 1 2; do
        for mbs in 1 2; do
          grep -q "z${stage}_mbs${mbs}_gas1 .*pruned: " autotuning_results/summary.txt || fail "z${stage}_mbs${mbs} not pruned"
        done
      done
      grep -q "^\* *| z3_mbs2_gas1 .*32 " autotuning_results/summary.txt || fail "best"
    done
    # The second attempt ran nothing: both stage-3 results came from the first.
    [ "$(grep -c 'from an earlier run' "$log")" = 2 ] || fail "overwrite false should reuse the metrics"
    DS_AUTOTUNING_MEMORY_PER_RANK=lots "$bin/deepspeed" --num_procs 2 --autotuning tune "$here/fake_trainer.py" \
      --deepspeed_config ds.json > "$log" 2>&1
    [ $? = 1 ] && [ "$(wc -l < "$log")" = 1 ] && grep -q "DS_AUTOTUNING_MEMORY_PER_RANK='lots'" "$log" ||
      fail "bad DS_AUTOTUNING_MEMORY_PER_RANK"
    ;;
  bad_input)
    echo '{"train_batch_size": 8}' > ds.json
    "$bin/deepspeed" --num_procs 2 --autotuning tune "$here/fake_trainer.py" > "$log" 2>&1
    code=$?
    [ $code = 1 ] && [ "$(wc -l < "$log")" = 1 ] || fail "missing config: exit $code"
    grep -q "^deepspeed: error: --autotuning needs the program's DeepSpeed config: pass it as --deepspeed_config PATH" "$log" || fail "message"
    echo '{"train_batch_size": 8, "autotuning": {"tuner_type": "bayes"}}' > bad.json
    "$bin/deepspeed" --num_procs 2 --autotuning tune "$here/fake_trainer.py" --deepspeed_config bad.json > "$log" 2>&1
    code=$?
    [ $code = 1 ] && [ "$(wc -l < "$log")" = 1 ] || fail "bad tuner_type: exit $code"
    grep -q "autotuning.tuner_type" "$log" || fail "the key is not named"
    "$bin/deepspeed" --num_procs 2 --autotuning search "$here/fake_trainer.py" > "$log" 2>&1
    [ $? = 2 ] || fail "--autotuning search must be a usage error"
    one_line_error() {  # one_line_error <config json> <expected text> [env...]
      echo "$1" > case.json
      env "${@:3}" "$bin/deepspeed" --num_procs 2 --autotuning tune "$here/fake_trainer.py" \
        --deepspeed_config case.json > "$log" 2>&1
      code=$?
      [ $code = 1 ] && [ "$(wc -l < "$log")" = 1 ] && grep -qF -- "$2" "$log" || fail "want one line with '$2' (exit $code)"
    }
    info='"model_info": {"num_params": 1000}'
    one_line_error "{\"train_micro_batch_size_per_gpu\": 1, \"autotuning\": {$info, \"arg_mappings\": {\"no_such_key\": \"--x\"}}}" \
      "autotuning.arg_mappings.no_such_key: the trial config has no top-level value 'no_such_key' to pass as --x"
    touch a_file
    one_line_error "{\"train_micro_batch_size_per_gpu\": 1, \"autotuning\": {$info, \"exps_dir\": \"a_file/exps\"}}" \
      "autotuning.exps_dir: cannot write to a_file/exps"
    one_line_error "{\"train_micro_batch_size_per_gpu\": 1, \"autotuning\": {$info, \"metric\": \"latency\"}}" \
      "autotuning.metric: latency (seconds per step) compares configs only at one batch size"
    one_line_error '{"train_micro_batch_size_per_gpu": 1, "autotuning": {"model_info": {"hidden_size": 64}}}' \
      "autotuning.model_info: give both hidden_size and num_layers"
    one_line_error "{\"train_micro_batch_size_per_gpu\": 1, \"autotuning\": {$info}}" \
      "DS_AUTOTUNING_TRIAL_TIMEOUT='inf' must be a number of seconds in (0, 1e7]" DS_AUTOTUNING_TRIAL_TIMEOUT=inf
    one_line_error "{\"train_micro_batch_size_per_gpu\": 1, \"autotuning\": {$info}}" \
      "DS_AUTOTUNING_MEMORY_PER_RANK='1e30G' must be a number of bytes from 1 to 1e18" DS_AUTOTUNING_MEMORY_PER_RANK=1e30G
    "$bin/deepspeed" --num_procs 2 --no_ssh --node_rank 0 --autotuning tune "$here/fake_trainer.py" \
      --deepspeed_config case.json > "$log" 2>&1
    [ $? = 1 ] && grep -q "drop --no_ssh, --node_rank and --world_info" "$log" || fail "--no_ssh with --autotuning"
    ;;
  interrupt|interrupt_background)
    # Ctrl-C during a trial: the trial's ranks are stopped, the autotuner exits 130. With job control
    # on, the background autotuner starts as from a terminal; without it (interrupt_background) it
    # starts with SIGINT ignored, as a background job of a script, and kill -INT must stop it all
    # the same (as it stops the launcher).
    [ "$case_name" = interrupt ] && set -m
    cat > ds.json << 'JSON'
{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 0},
 "autotuning": {"min_train_micro_batch_size_per_gpu": 4, "max_train_micro_batch_size_per_gpu": 4,
                "model_info": {"num_params": 1000}}}
JSON
    "$bin/deepspeed" --num_procs 2 --master_port "$port" --autotuning tune "$here/fake_trainer.py" \
      --deepspeed_config ds.json > "$log" 2>&1 &
    tuner=$!
    for try in $(seq 100); do
      [ "$(ours "$here/fake_trainer.py" | wc -l)" -ge 2 ] && break
      sleep 0.1
    done
    [ "$(ours "$here/fake_trainer.py" | wc -l)" -ge 2 ] || fail "the trial did not start"
    kill -INT $tuner
    wait $tuner
    code=$?
    cat "$log"
    [ $code = 130 ] || fail "exit code $code, want 130"
    grep -q "autotuning interrupted by signal 2 after 1 trials" "$log" || fail "no message"
    for try in $(seq 100); do
      [ -n "$(ours "$here/fake_trainer.py")" ] || break
      sleep 0.1
    done
    [ -n "$(ours "$here/fake_trainer.py")" ] && fail "trial processes left running"
    ;;
  gpt)
    # A real small tuning run of the GPT example: every trial trains for real and reports its
    # measured throughput; the winner then trains to the end.
    cat > ds.json << 'JSON'
{"train_batch_size": 8, "steps_per_print": 100,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
 "autotuning": {"enabled": true, "start_profile_step": 2, "end_profile_step": 4,
                "max_train_micro_batch_size_per_gpu": 4, "num_tuning_micro_batch_sizes": 2}}
JSON
    "$bin/deepspeed" --num_procs 2 --master_port "$port" --autotuning run "$bin/train_gpt" \
      --deepspeed_config ds.json --layers 2 --hidden 64 --heads 4 --seq-len 32 --steps 8 > "$log" 2>&1 ||
      fail "exit code $?"
    cat "$log"
    grep -q "autotuning: measuring the model" "$log" || fail "no profiling run"
    grep -q "autotuning: 8 candidates (0 pruned" "$log" || fail "want stages 0-3 x micro batches 1, 4"
    # Early stopping (default 5 trials without a better metric) may end the search before all 8.
    ok=$(grep -cE '\| ok *$' autotuning_results/summary.txt)
    rows=$(grep -c '| z[0-3]_' autotuning_results/summary.txt)
    [ "$ok" = "$rows" ] && [ "$ok" -ge 6 ] || fail "every GPT trial should succeed ($ok of $rows ok)"
    best=$(sed -n 's/^best: \(z[0-3]_mbs[0-9]*_gas[0-9]*\) .*/\1/p' autotuning_results/summary.txt)
    [ -n "$best" ] && grep -q "^\* *| $best " autotuning_results/summary.txt || fail "no best row"
    python3 - "$best" << 'PY' || fail "the optimal config is not the best trial's"
import json, re, sys
stage, mbs, gas = map(int, re.match(r"z(\d)_mbs(\d+)_gas(\d+)", sys.argv[1]).groups())
c = json.load(open("autotuning_results/ds_config_optimal.json"))
assert c["zero_optimization"]["stage"] == stage and c["train_micro_batch_size_per_gpu"] == mbs, c
assert c["gradient_accumulation_steps"] == gas and c["train_batch_size"] == 8, c
PY
    grep -q "final step=8 " "$log" || fail "the final run did not train"
    [ -n "$(ours "$bin/train_gpt")" ] && fail "trial processes left running"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo PASS
