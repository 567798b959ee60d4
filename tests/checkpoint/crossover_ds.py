"""Python DeepSpeed's side of the checkpoint crossover test (crossover_test.py): trains the crossover GPT (models/gpt.cc
mirrored by bench/peer/peer_gpt.py, at crossover_program.cc's sizes) from the initial weights crossover_program
exported, on the crossover batches, and prints each step's loss (mean over ranks) on rank 0:

    crossover_loss step=<data step> loss=<%.9g>

    python -m torch.distributed.run --nproc_per_node 2 crossover_ds.py --config c.json --init init.safetensors \
        --steps M [--load_dir D] [--save_dir D --save_at N]

The config's "optimizer" section becomes a client torch.optim.AdamW/Adam with its numbers (DeepSpeed's own Adam is a
JIT-built op on CPU: minutes on a fresh machine); the rest of the config goes to deepspeed.initialize as it is.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch  # noqa: E402

torch.set_num_threads(1)
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peer"))
import peer_gpt  # noqa: E402

# crossover_program.cc's crossover_gpt().
CROSSOVER_GPT = dict(vocab_size=64, seq_len=16, layers=2, hidden=32, heads=2, bias=True)


def crossover_tokens(step, rank, world, micro, seq_len):
    """crossover_program.cc's crossover_tokens(): [micro, seq_len + 1] int64."""
    rows = []
    for i in range(micro):
        sample = (step * world + rank) * micro + i
        rows.append([(sample * 3 + j + (sample if j % 5 == 4 else 0)) % 8 for j in range(seq_len + 1)])
    return torch.tensor(rows, dtype=torch.long)


class Wrapped(torch.nn.Module):
    """The GPT one module down, as a user's training wrapper puts it: its names gain a "gpt." prefix."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, tokens, targets):
        return self.gpt(tokens, targets)


def build_model(init, config, stage):
    import deepspeed
    if stage != 3:
        model = peer_gpt.GPT(**CROSSOVER_GPT)
        peer_gpt.load_safetensors(dict(model.named_parameters()), init)
        return model
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = peer_gpt.GPT(**CROSSOVER_GPT)
    for prefix, module in model.named_modules():
        own = dict(module.named_parameters(recurse=False))
        if own:
            with deepspeed.zero.GatheredParameters(list(own.values()), modifier_rank=0):
                if dist.get_rank() == 0:
                    # fp32 first: under a bf16 config zero.Init makes bf16 parameters.
                    full = {f"{prefix}.{n}" if prefix else n: torch.empty(p.shape) for n, p in own.items()}
                    peer_gpt.load_safetensors(full, init, subset=True)
                    with torch.no_grad():
                        for n, p in own.items():
                            p.copy_(full[f"{prefix}.{n}" if prefix else n])
    return model


def client_optimizer(params, section):
    p = dict(section.get("params", {}))
    adamw = section["type"].lower() == "adamw" or p.get("adam_w_mode", True)
    cls = torch.optim.AdamW if adamw else torch.optim.Adam
    return cls(params, lr=p.get("lr", 1e-3), betas=tuple(p.get("betas", (0.9, 0.999))), eps=p.get("eps", 1e-8),
               weight_decay=p.get("weight_decay", 0.0))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--init", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--load_dir", default="")
    parser.add_argument("--save_dir", default="")
    parser.add_argument("--save_at", type=int, default=-1)
    parser.add_argument("--wrap", action="store_true", help="train the GPT inside a wrapper module ('gpt.' names)")
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    optimizer_section = config.pop("optimizer")
    import deepspeed
    import deepspeed.comm.torch  # noqa: F401
    # Its shared-memory all-reduce op would be JIT-built (minutes on a fresh machine) for a speed-up only. Through
    # sys.modules: the attribute deepspeed.comm.torch is torch itself (deepspeed.comm re-exports it).
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    stage = config.get("zero_optimization", {}).get("stage", 0)
    model = build_model(args.init, config, stage)
    if args.wrap:
        model = Wrapped(model)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=client_optimizer(model.parameters(),
                                                                                   optimizer_section),
                                           config=config)
    first = 0
    if args.load_dir:
        path, client = engine.load_checkpoint(args.load_dir)
        if path is None:
            raise RuntimeError(f"DeepSpeed loaded nothing from {args.load_dir}")
        if rank == 0 and "crossover_epoch" in (client or {}):
            print(f"crossover_client_state crossover_epoch={client['crossover_epoch']}", flush=True)
        first = engine.global_steps
    micro = config["train_micro_batch_size_per_gpu"]
    for s in range(first, first + args.steps):
        tokens = crossover_tokens(s, rank, world, micro, CROSSOVER_GPT["seq_len"])
        loss = engine(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
        engine.backward(loss)
        engine.step()
        mean = torch.tensor([loss.float().item()], dtype=torch.float64)
        dist.all_reduce(mean)
        if rank == 0:
            print(f"crossover_loss step={s} loss={mean.item() / world:.9g}", flush=True)
        if args.save_dir and (s + 1 == args.save_at or (args.save_at < 0 and s + 1 == first + args.steps)):
            engine.save_checkpoint(args.save_dir, client_state={"crossover_epoch": 7})
            if rank == 0:
                # fp32 at stage 0 runs the client optimizer as it is: no loss scale (ours reports 1).
                scale = float(getattr(engine.optimizer, "loss_scale", 1.0))
                print(f"crossover_loss_scale={scale:.9g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # Past this point the run has succeeded and said everything; the interpreter's own teardown can still abort the
    # process (a native thread of DeepSpeed's or torch's left joinable: "terminate called without an active
    # exception", seen a few times in a hundred runs here), so leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
