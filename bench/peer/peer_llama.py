"""The tiny Llama of the peer benchmark's MODEL=llama rows, made and saved by transformers itself, and the way HF
Trainer hands it to DeepSpeed.

    python peer_llama.py OUT_DIR [--seed 1234]      # writes OUT_DIR/config.json and OUT_DIR/model.safetensors

The model: vocab 4096, hidden 384, 6 layers, 6 heads with 2 key/value heads (grouped-query attention), SwiGLU
intermediate 1024, llama3 rope scaling, untied head, fp32 (12.6M parameters; the reference GPT's size). Its
weights are transformers' own random initialisation under torch.manual_seed(seed); both sides then read the same
folder: bench_peer_ours --model_dir with our loader (deepspeed/models/hf_checkpoint.h), peer_ds.py with
`from_pretrained` (inside deepspeed.zero.Init at stage 3, as HF Trainer does through HfDeepSpeedConfig).
"""
import argparse

import torch

SEQ_LEN = 128  # both sides train on [micro, 128] tokens (bench_peer_ours --seq_len)


def config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=4096, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                       num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                       tie_word_embeddings=False,
                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 64})


def load(folder, ds_config=None):
    """The model from `folder` in fp32. With a ZeRO-3 `ds_config`, HfDeepSpeedConfig makes from_pretrained build it
    inside deepspeed.zero.Init and load each rank's partitions (what HF Trainer does for a stage-3 config); the
    returned object must stay alive while the model is built, so it is returned too."""
    from transformers import AutoModelForCausalLM
    keep = None
    if ds_config is not None and ds_config.get("zero_optimization", {}).get("stage", 0) == 3:
        from transformers.integrations import HfDeepSpeedConfig
        keep = HfDeepSpeedConfig(ds_config)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    return model, keep


def loss_of(model, x, y):
    """Mean cross-entropy of the logits of x against the next tokens y, as transformers' causal-LM loss computes it
    (logits upcast to fp32)."""
    logits = model(input_ids=x, use_cache=False).logits  # training: no KV cache (a careful HF user's setting)
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    from transformers import LlamaForCausalLM
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config())
    model.save_pretrained(args.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"peer_llama.py: wrote a {n / 1e6:.1f}M-parameter Llama to {args.out}")


if __name__ == "__main__":
    main()
