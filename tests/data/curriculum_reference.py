"""The sequence-length curriculum against DeepSpeed 0.19.8 itself (tests/data/curriculum_test.cc reads the output).

Usage: curriculum_reference.py BIN_DIR OUT_DIR. For each case config below, ds_check_config writes our resolved
config (the top-level pre-0.19.8 form comes back as data_efficiency), DeepSpeed's DeepSpeedConfig must accept it, and
DeepSpeed's CurriculumScheduler built from DeepSpeed's reading of it gives the length of steps 1..STEPS, called in
order as its data sampler calls update_difficulty. Writes OUT_DIR/curriculum_expected.json:
[{"name", "config": <the case's JSON>, "lengths": [...]}].

Then end to end: train_gpt (one process, sequence length 32) trains STEPS_RUN steps under the "discrete" case with a
csv monitor; each step's tokens/s over samples/s (one step's time in both) is the tokens per sample that trained,
which must be DeepSpeed's length for that step.
"""
import json
import os
import shutil
import subprocess
import sys

from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.data_pipeline.curriculum_scheduler import CurriculumScheduler

STEPS = 60
STEPS_RUN = 8


def metric(min_d, max_d, schedule_type, schedule_config):
    return {"min_difficulty": min_d, "max_difficulty": max_d, "schedule_type": schedule_type,
            "schedule_config": schedule_config, "difficulty_type": "value", "clustering_type": "single_cluster"}


def data_efficiency(m):
    return {"data_efficiency": {"enabled": True, "data_sampling": {"enabled": True, "curriculum_learning": {
        "enabled": True, "data_cluster_path": "/tmp/ds_clusters", "curriculum_metrics": {"seqlen": m}}}}}


BASE = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}
CASES = {
    # The form of DeepSpeed's curriculum tutorial (top level, before 0.19.8).
    "legacy_linear": {"curriculum_learning": {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 8,
                                              "max_difficulty": 64, "schedule_type": "fixed_linear",
                                              "schedule_config": {"total_curriculum_step": 40,
                                                                  "difficulty_step": 8}}},
    "root": data_efficiency(metric(16, 128, "fixed_root", {"total_curriculum_step": 50, "difficulty_step": 8,
                                                          "root_degree": 2})),
    # min_difficulty not a multiple of difficulty_step: DeepSpeed raises the floor to the next multiple.
    "linear_floor": data_efficiency(metric(8, 96, "fixed_linear", {"total_curriculum_step": 30,
                                                                  "difficulty_step": 16})),
    "discrete": data_efficiency(metric(8, 32, "fixed_discrete", {"difficulty": [8, 16, 24, 32],
                                                                "max_step": [2, 4, 6]})),
}


def ours_resolved(bin_dir, path):
    run = subprocess.run([os.path.join(bin_dir, "ds_check_config"), path], capture_output=True, text=True,
                         check=True)
    return json.loads(run.stdout)


def deepspeed_lengths(resolved):
    config = DeepSpeedConfig(resolved)  # raises if DeepSpeed refuses what we wrote
    cl = config.data_efficiency_config["data_sampling"]["curriculum_learning"]
    assert cl["enabled"], "DeepSpeed reads our dump without the curriculum"
    scheduler = CurriculumScheduler(cl["curriculum_metrics"]["seqlen"])
    return [scheduler.update_difficulty(step) for step in range(1, STEPS + 1)]


def csv_values(path):
    with open(path) as f:
        return [float(line.split(",")[1]) for line in f.read().splitlines()[1:]]


def main():
    bin_dir, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    expected = []
    for name, case in CASES.items():
        config = dict(BASE, **case)
        path = os.path.join(out, f"{name}.json")
        with open(path, "w") as f:
            json.dump(config, f)
        lengths = deepspeed_lengths(ours_resolved(bin_dir, path))
        expected.append({"name": name, "config": config, "lengths": lengths})
        print(f"{name}: {lengths[:12]} ...")
    with open(os.path.join(out, "curriculum_expected.json"), "w") as f:
        json.dump(expected, f)

    case = next(e for e in expected if e["name"] == "discrete")
    runs = os.path.join(out, "runs")
    shutil.rmtree(runs, ignore_errors=True)  # the csv monitor appends to the files of a previous run
    config = dict(case["config"], csv_monitor={"enabled": True, "output_path": runs, "job_name": "curriculum"})
    path = os.path.join(out, "discrete_run.json")
    with open(path, "w") as f:
        json.dump(config, f)
    run = subprocess.run([os.path.join(bin_dir, "deepspeed"), "--num_procs", "1", "--master_port",
                          os.environ.get("DS_TEST_PORT", "29731"), os.path.join(bin_dir, "train_gpt"),
                          "--deepspeed_config", path, "--layers", "2", "--hidden", "64", "--heads", "4",
                          "--seq-len", "32", "--steps", str(STEPS_RUN)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "sequence-length curriculum from 8 to 32 tokens" in run.stderr, run.stderr[-2000:]
    tokens = csv_values(os.path.join(runs, "curriculum", "Train_Samples_tokens_per_sec.csv"))
    samples = csv_values(os.path.join(runs, "curriculum", "Train_Samples_samples_per_sec.csv"))
    assert len(tokens) == STEPS_RUN and len(samples) == STEPS_RUN, (tokens, samples)
    trained = [t / s for t, s in zip(tokens, samples)]
    want = case["lengths"][:STEPS_RUN]
    assert all(abs(a - b) <= 1e-9 * b for a, b in zip(trained, want)), f"trained lengths {trained}, DeepSpeed's {want}"
    print(f"train_gpt trained {[round(t) for t in trained]} tokens per sample, DeepSpeed's schedule {want}")


if __name__ == "__main__":
    main()
