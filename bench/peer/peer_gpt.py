"""The reference GPT of models/gpt.cc as a torch.nn module, the peer benchmark's batches, and the loader of the
initial weights bench_peer_ours exports.

Mirrors models/gpt.{h,cc} and models/gpt_init.cc op for op, so that with the same weights and tokens both sides run
the same LibTorch kernels in the same order:
  - parameter names and registration order: wte, wpe, blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, fc, fc_proj},
    ln_f, lm_head (untied head, no bias);
  - LayerNorm eps 1e-5 with affine weight and bias (LibTorch's defaults), Linear layers with bias (GPTConfig::bias);
  - attention: qkv -> view [b, t, 3, h, d] -> permute(2, 0, 3, 1, 4); scores = q @ k^T * (1 / sqrt(d)), the future
    masked with -inf via a triu(1) boolean mask, softmax over the last dim, (att @ v).transpose(1, 2).reshape;
  - MLP: fc_proj(gelu(fc(ln2(h)), approximate="tanh")); pre-LayerNorm residuals x + attn(ln1(x)), h + mlp;
  - loss: cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)), mean over tokens;
  - dropout 0 (the C++ side skips dropout entirely when p == 0, so no op is missing here).
The initial values are not re-drawn here: bench_peer_ours --export_init writes its model's initial parameters as a
safetensors file and load_safetensors() reads each tensor's bytes straight into the parameter (no second copy of
the model in memory, so the peak resident figure is not inflated by the load).
"""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# models/gpt.h GPTConfig as bench/common/bench_util.h's reference_gpt() sets it.
REFERENCE = dict(vocab_size=4096, seq_len=128, layers=6, hidden=384, heads=6, bias=True)


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, bias):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=bias)
        self.proj = nn.Linear(hidden, hidden, bias=bias)

    def forward(self, x):
        b, t, c = x.shape
        d = c // self.heads
        qkv = self.qkv(x).view(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        att = torch.softmax(scores, -1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class GPTBlock(nn.Module):
    def __init__(self, hidden, heads, bias):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, bias)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden, bias=bias)
        self.fc_proj = nn.Linear(4 * hidden, hidden, bias=bias)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        m = self.fc_proj(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))
        return h + m


class GPT(nn.Module):
    """models::GPT with tied_head=false, dropout 0: forward(tokens, targets) returns the mean cross-entropy."""

    def __init__(self, vocab_size, seq_len, layers, hidden, heads, bias=True):
        super().__init__()
        self.seq_len = seq_len
        self.wte = nn.Embedding(vocab_size, hidden)
        self.wpe = nn.Embedding(seq_len, hidden)
        self.blocks = nn.ModuleList([GPTBlock(hidden, heads, bias) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False)

    def forward(self, tokens, targets):
        t = tokens.size(1)
        if t > self.seq_len:
            raise ValueError(f"GPT: sequence of {t} tokens exceeds seq_len {self.seq_len}")
        pos = torch.arange(t, dtype=torch.long)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def load_safetensors(params, path, subset=False):
    """Reads the tensors of the safetensors file `path` into `params` (name -> fp32 tensor, e.g. a dict of
    named_parameters()), each straight from the file into the tensor's memory. Every name must be in the file
    with the same shape, and (unless `subset`) every tensor of the file in `params`; raises ValueError naming the
    ones that are not."""
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
        header.pop("__metadata__", None)
        data_start = 8 + header_len
        missing = sorted(set(params) - set(header))
        extra = [] if subset else sorted(set(header) - set(params))
        if missing or extra:
            raise ValueError(f"{path}: parameters missing from the file {missing}, in the file but not the model {extra}")
        with torch.no_grad():
            for name, p in params.items():
                entry = header[name]
                if entry["dtype"] != "F32" or list(entry["shape"]) != list(p.shape):
                    raise ValueError(f"{path}: {name} is {entry['dtype']} {entry['shape']}, "
                                     f"the model's is float32 {list(p.shape)}")
                begin, end = entry["data_offsets"]
                if not p.is_contiguous() or end - begin != p.numel() * 4:
                    raise ValueError(f"{path}: {name}: {end - begin} bytes for {p.numel()} fp32 elements")
                f.seek(data_start + begin)
                if f.readinto(memoryview(p.numpy()).cast("B")) != end - begin:
                    raise ValueError(f"{path}: {name}: file truncated")


# The batches: one deterministic integer generator, implemented identically in peer_ours.cc (peer_tokens()).
_M64 = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def peer_tokens(seed, step, rank, world, micro, seq_len, vocab):
    """[micro, seq_len + 1] int64 tokens of this rank's micro-batch at `step`. Each row is an arithmetic
    progression mod vocab (a start and a stride in 1..31 drawn per sample) with one token in eight replaced by a
    random one, so the loss falls over a few steps (it would sit at ln(vocab) on uniform noise) and two runs that
    drift apart show it in the loss."""
    rows = []
    for i in range(micro):
        sample = (step * world + rank) * micro + i
        base = splitmix64((seed ^ ((sample * 0xD1B54A32D192ED03) & _M64)) & _M64)
        start, stride = base % vocab, 1 + (base >> 32) % 31
        row = []
        for j in range(seq_len + 1):
            r = splitmix64((base + j) & _M64)
            row.append((r >> 8) % vocab if r % 8 == 0 else (start + j * stride) % vocab)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.long)
