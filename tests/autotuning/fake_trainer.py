#!/usr/bin/env python3
"""A stand-in training program for the autotuner's end-to-end tests, run as ranks by the launcher.

It does what a real run does for the autotuner, instantly and by rule:
  * a profiling run (autotuning.model_info.profile) writes model_info_path, then waits to be stopped;
  * a trial (autotuning.metric_path) reports throughput = 10 x stage + micro batch, then waits,
    except: stage 1 crashes (exit 3), stage 2 with micro batch 8 runs out of memory (bad_alloc),
    stage 0 with micro batch 4 never reports (the trial times out);
  * any other run (the final one, with the optimal config) prints what it runs with and exits 0.
--batch N must equal the config's micro batch (autotuning.arg_mappings passes it) when given.
"""
import json
import os
import signal
import sys
import time

args = sys.argv[1:]
if args and args[0].startswith("--local_rank="):
    args = args[1:]
if "--deepspeed_config" in args:
    config_path = args[args.index("--deepspeed_config") + 1]
else:
    config_path = next(a.split("=", 1)[1] for a in args if a.startswith("--deepspeed_config="))
with open(config_path) as f:
    config = json.load(f)
rank = int(os.environ["RANK"])
stage = config.get("zero_optimization", {}).get("stage", 0)
mbs = config["train_micro_batch_size_per_gpu"]
at = config.get("autotuning", {})
if "--batch" in args and int(args[args.index("--batch") + 1]) != mbs:
    print(f"--batch {args[args.index('--batch') + 1]} != micro batch {mbs}", file=sys.stderr)
    sys.exit(9)


def write(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)


def wait_to_be_stopped():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    while True:
        time.sleep(1)


if at.get("model_info", {}).get("profile"):
    if rank == 0:
        write(at["model_info_path"], {"num_params": 1000, "trainable_num_params": 1000})
    wait_to_be_stopped()
if at.get("metric_path"):
    if stage == 1:
        sys.exit(3)
    if stage == 2 and mbs == 8:
        print("terminate called after throwing an instance of 'std::bad_alloc'", file=sys.stderr)
        sys.exit(1)
    if stage == 0 and mbs == 4:
        wait_to_be_stopped()
    if rank == 0:
        throughput = 10.0 * stage + mbs
        write(at["metric_path"], {"throughput": throughput, "latency": 1.0 / throughput})
    wait_to_be_stopped()
print(f"final run stage={stage} mbs={mbs} autotuning={at.get('enabled', False)}")
