"""Checks tests/zero/nonfinite_cases.json against Python DeepSpeed: for each case (precision, ZeRO stage), one rank on
the CPU trains a small model three steps with a NaN in the second step's batch, and the case's `skips` must say
whether DeepSpeed left the weights unchanged (skipped the step). Exit 0 when every verdict agrees, 1 otherwise,
77 when deepspeed cannot be imported (ctest: skipped)."""
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000), "RANK": "0",
             "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
    os.environ.setdefault(k, v)
try:
    import deepspeed
    import torch
except ImportError:
    sys.exit(77)


def weights(engine, stage):
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params) if stage == 3 else torch.no_grad():
        return [p.detach().float().clone() for p in params]


def skips(precision, stage):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    cfg = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 1000,
           "optimizer": {"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}},
           "zero_optimization": {"stage": stage}}
    if precision.startswith("bf16"):
        cfg["bf16"] = {"enabled": True, "check_grad_overflow": precision == "bf16"}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float32
    verdict = None
    for step in range(3):
        x = torch.randn(2, 8, dtype=dtype)
        if step == 1:
            x[0, 3] = float("nan")
        before = weights(engine, stage)
        engine.backward(engine(x).float().pow(2).mean())
        engine.step()
        if step == 1:
            verdict = all(torch.equal(a, b) for a, b in zip(before, weights(engine, stage)))
    return verdict


def main():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "nonfinite_cases.json")) as f:
        cases = json.load(f)["cases"]
    wrong = 0
    for c in cases:
        got = skips(c["precision"], c["stage"])
        ok = got == c["skips"]
        wrong += not ok
        print(f"{c['precision']} stage {c['stage']}: DeepSpeed {'skips' if got else 'steps on'}"
              f"{'' if ok else ' (the table says otherwise)'}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
