"""megatron-core's GPTDataset over a corpus, the reference for deepspeed::data::GPTDataset
(tests/data/gpt_dataset_test.cc).

    megatron_gpt_samples.py PREFIX SEQ_LEN NUM_SAMPLES SEED OUT [FIRST END]
    megatron_gpt_samples.py cases DIR     each of CASES over DIR/megatron_uint16, to DIR/gpt_<name>.samples, and
                                          each of BLENDS (BlendedMegatronDatasetBuilder) to DIR/blend_<name>.samples

Writes OUT: every sample megatron-core's GPTDataset (train split, the sequences [FIRST, END), default all) gives, in
its order, as little-endian int64 rows of SEQ_LEN + 1 tokens. NUM_SAMPLES -1: one epoch (num_samples None). Its
indices are cached in a temporary folder that is removed.
"""
import sys
import tempfile
import types

import numpy

from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.core.datasets.utils import Split


# name: (sequence length, samples, seed, first sequence, end sequence), written again in gpt_dataset_test.cc. The
# corpus (megatron_indexed.py's) holds 1461 tokens in 49 sequences.
CASES = {
    "one_epoch": (16, -1, 1234, 0, 49),
    "four_epochs_last_apart": (16, 300, 1234, 0, 49),    # the final epoch gives 27 of 91 samples: shuffled apart
    "two_epochs_shuffled_together": (16, 171, 1234, 0, 49),  # 80 of 91 (above Megatron's 80%): one shuffle
    "short_windows": (7, 260, 5, 0, 49),
    "split": (16, 60, 99, 10, 40),
}

# name: (weights and corpora of the data path, sequence length, samples, seed); in gpt_dataset_test.cc too.
BLENDS = {
    "blend_30_70": ([0.3, "megatron_uint16", 0.7, "megatron_int32"], 16, 200, 1234),
    "blend_three": ([2, "megatron_uint16", 1, "megatron_int32", 1, "megatron_uint16"], 7, 150, 7),
    "blend_by_size": (["megatron_uint16", "megatron_int32"], 7, 500, 3),
}

# What GPTDatasetConfig asks of a tokenizer here: a vocabulary size and the ids it pads and ends documents with
# (training samples are never padded: the last partial window is dropped).
TOKENIZER = types.SimpleNamespace(vocab_size=65000, eod=0, pad=0, unique_identifiers={"class": "none"})


def blend(folder, path, seq, num, seed, out):
    weighted = not isinstance(path[0], str)
    prefixes = [f"{folder}/{p}" for p in (path[1::2] if weighted else path)]
    weights = [float(w) for w in path[0::2]] if weighted else None
    # No cache folder: BlendedDataset's cache wants a torch.distributed world.
    config = GPTDatasetConfig(random_seed=seed, sequence_length=seq, blend=(prefixes, weights), split="1,0,0",
                              path_to_cache=None, tokenizer=TOKENIZER, reset_position_ids=False,
                              reset_attention_mask=False, eod_mask_loss=False)
    train = BlendedMegatronDatasetBuilder(GPTDataset, [num, 0, 0], lambda: True, config).build()[0]
    rows = [train.datasets[train.dataset_index[i]]._query_document_sample_shuffle_indices(
        int(train.dataset_sample_index[i]))[0] for i in range(len(train))]
    numpy.stack(rows).astype("<i8").tofile(out)
    print(f"megatron-core BlendedDataset: {len(rows)} samples of {seq + 1} tokens to {out}")


def samples(prefix, seq, num, seed, out, first=None, end=None):
    corpus = IndexedDataset(prefix)
    first, end = (0, len(corpus)) if first is None else (first, end)
    with tempfile.TemporaryDirectory() as cache:
        config = GPTDatasetConfig(random_seed=seed, sequence_length=seq, split="1,0,0", path_to_cache=cache,
                                  tokenizer=TOKENIZER, reset_position_ids=False, reset_attention_mask=False,
                                  eod_mask_loss=False)
        dataset = GPTDataset(corpus, prefix, numpy.arange(first, end, dtype=numpy.int32),
                             None if num < 0 else num, Split.train, config)
        rows = [dataset._query_document_sample_shuffle_indices(i)[0] for i in range(len(dataset))]
    numpy.stack(rows).astype("<i8").tofile(out)
    print(f"megatron-core GPTDataset: {len(rows)} samples of {seq + 1} tokens to {out}")


if __name__ == "__main__":
    if sys.argv[1] == "cases":
        for name, (seq, num, seed, first, end) in CASES.items():
            samples(f"{sys.argv[2]}/megatron_uint16", seq, num, seed, f"{sys.argv[2]}/gpt_{name}.samples", first, end)
        for name, (path, seq, num, seed) in BLENDS.items():
            blend(sys.argv[2], path, seq, num, seed, f"{sys.argv[2]}/blend_{name}.samples")
    else:
        a = sys.argv
        samples(a[1], int(a[2]), int(a[3]), int(a[4]), a[5], *(int(v) for v in a[6:8]))
