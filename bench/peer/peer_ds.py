"""DeepSpeed's side of the peer benchmark (and the plain PyTorch DDP reference): trains peer_gpt.GPT from the
initial weights bench_peer_ours exported, on the batches peer_gpt.peer_tokens() makes, and prints one result line.

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node 2 \
        bench/peer/peer_ds.py --deepspeed_config bench/peer/configs/zero2.json --init init.safetensors
    ... peer_ds.py --ddp --deepspeed_config bench/peer/configs/zero0.json ...   (DDP, the config's Adam settings)
    ... peer_ds.py --model_dir llama/ ...   (MODEL=llama: the HF folder peer_llama.py wrote, via from_pretrained)

Rank 0 prints `peer_row side=ds label=... median_s=... base_mib=... vmhwm_mib=... loss=... steps=...`, the same
line bench_peer_ours prints (run_peer.sh collects both): the median over the timed steps of the slowest rank's
step time (forward + backward + step, each step started together after a barrier), the largest rank's resident
memory before the model is built (after imports, process group and batches) and its peak (VmHWM) at the end of the
run, and the last step's loss averaged over ranks. It also prints which optimizer class DeepSpeed instantiated for
the config's "Adam" and its mode (`peer_optimizer ...`), so the table can show that both sides run the same Adam.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch  # noqa: E402

torch.set_num_threads(1)
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_gpt  # noqa: E402
import peer_llama  # noqa: E402


def status_mib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/self/status has no {key}")


def max_over_ranks(values):
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def build_model(args, config, stage):
    """With --model_dir: the HF Llama from its folder, as HF Trainer builds it (inside deepspeed.zero.Init at stage 3,
    through HfDeepSpeedConfig); `args.keep` holds what must outlive the build. Otherwise the GPT with the exported
    initial weights. At stage 3 it is built inside deepspeed.zero.Init (as the C++
    side builds its blocks inside zero::Init), so no rank holds the whole model, and each module's weights are
    written inside GatheredParameters(modifier_rank=0) and partitioned again."""
    import deepspeed
    if args.model_dir:
        model, args.keep = peer_llama.load(args.model_dir, config)
        return model
    if stage != 3:
        model = peer_gpt.GPT(**peer_gpt.REFERENCE)
        peer_gpt.load_safetensors(dict(model.named_parameters()), args.init)
        return model
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = peer_gpt.GPT(**peer_gpt.REFERENCE)
    # One module at a time, so at most one module's parameters are whole at once.
    loaded = set()
    for prefix, module in model.named_modules():
        own = dict(module.named_parameters(recurse=False))
        if not own:
            continue
        with deepspeed.zero.GatheredParameters(list(own.values()), modifier_rank=0):
            if dist.get_rank() == 0:
                full = {f"{prefix}.{n}" if prefix else n: p for n, p in own.items()}
                peer_gpt.load_safetensors(full, args.init, subset=True)
        loaded.update(f"{prefix}.{n}" if prefix else n for n in own)
    if loaded != set(n for n, _ in model.named_parameters()):
        raise RuntimeError("stage 3: not every parameter was loaded")
    return model


def describe_optimizer(opt):
    name = type(opt).__name__
    mode = getattr(opt, "adam_w_mode", getattr(opt, "adamw_mode", None))
    if isinstance(opt, torch.optim.AdamW):
        mode = True
    elif isinstance(opt, torch.optim.Adam):
        mode = False
    wd = opt.param_groups[0].get("weight_decay")
    return f"{type(opt).__module__}.{name} adam_w_mode={mode} weight_decay={wd} lr={opt.param_groups[0]['lr']}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deepspeed_config", required=True, help="DeepSpeed JSON config (DDP: its optimizer params)")
    parser.add_argument("--ddp", action="store_true", help="plain torch DDP + torch.optim Adam(W) instead")
    parser.add_argument("--init", help="initial weights of the GPT (bench_peer_ours --export_init)")
    parser.add_argument("--model_dir", help="train this HF Llama folder (peer_llama.py) instead of the GPT")
    parser.add_argument("--label", default="", help="configuration name printed in the result line")
    parser.add_argument("--steps", type=int, default=6, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--seed", type=int, default=1234, help="data seed")
    parser.add_argument("--local_rank", type=int, default=-1, help="set by a launcher")
    args = parser.parse_args()
    if bool(args.init) == bool(args.model_dir):
        parser.error("pass exactly one of --init (the GPT) and --model_dir (the Llama)")
    with open(args.deepspeed_config) as f:
        config = json.load(f)
    micro = config["train_micro_batch_size_per_gpu"]
    stage = config.get("zero_optimization", {}).get("stage", 0)
    opt_params = dict(config["optimizer"]["params"])

    if args.ddp:
        dist.init_process_group("gloo")
    else:
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = peer_gpt.REFERENCE
    seq_len, vocab = cfg["seq_len"], cfg["vocab_size"]
    if args.model_dir:
        with open(os.path.join(args.model_dir, "config.json")) as f:
            seq_len, vocab = peer_llama.SEQ_LEN, json.load(f)["vocab_size"]
    total = args.warmup + args.steps
    batches = [peer_gpt.peer_tokens(args.seed, s, rank, world, micro, seq_len, vocab) for s in range(total)]
    dist.barrier()
    base = status_mib("VmRSS")

    forward = peer_llama.loss_of if args.model_dir else (lambda m, x, y: m(x, y))
    if args.ddp:
        if args.model_dir:
            model, _ = peer_llama.load(args.model_dir)
        else:
            model = peer_gpt.GPT(**cfg)
            peer_gpt.load_safetensors(dict(model.named_parameters()), args.init)
        model = torch.nn.parallel.DistributedDataParallel(model)
        # DeepSpeed's "Adam" with adam_w_mode true is AdamW (decoupled decay); foreach off: the CPU default.
        adamw = opt_params.get("adam_w_mode", True) or config["optimizer"]["type"].lower() == "adamw"
        cls = torch.optim.AdamW if adamw else torch.optim.Adam
        opt = cls(model.parameters(), lr=opt_params["lr"], betas=tuple(opt_params.get("betas", (0.9, 0.999))),
                  eps=opt_params.get("eps", 1e-8), weight_decay=opt_params.get("weight_decay", 0.0))

        # DeepSpeed clips the global gradient norm as the config says (1.0 when unset: 0.19.8's default).
        clip = config.get("gradient_clipping", 1.0)

        def train_step(x, y):
            loss = forward(model, x, y)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        described = describe_optimizer(opt)
    else:
        import deepspeed
        model = build_model(args, config, stage)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

        def train_step(x, y):
            loss = forward(engine, x, y)
            engine.backward(loss)
            engine.step()
            return loss
        described = describe_optimizer(engine.basic_optimizer)
    if rank == 0:
        print(f"peer_optimizer side={'ddp' if args.ddp else 'ds'} label={args.label} {described}", flush=True)

    times = []
    loss = None
    for s in range(total):
        x, y = batches[s][:, :-1].contiguous(), batches[s][:, 1:].contiguous()
        dist.barrier()
        t0 = time.perf_counter()
        loss = train_step(x, y)
        if s >= args.warmup:
            times.append(time.perf_counter() - t0)
    times = max_over_ranks(times)
    last = torch.tensor([loss.item()], dtype=torch.float64)
    dist.all_reduce(last)
    mem = max_over_ranks([base, status_mib("VmHWM")])
    if rank == 0:
        print(f"peer_row side={'ddp' if args.ddp else 'ds'} label={args.label} median_s={statistics.median(times):.6f} "
              f"base_mib={mem[0]:.1f} vmhwm_mib={mem[1]:.1f} loss={last.item() / world:.9g} steps={total} "
              f"threads={torch.get_num_threads()}", flush=True)
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
