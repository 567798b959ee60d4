"""megatron-core's GPTDataset over a corpus, the reference for deepspeed::data::GPTDataset
(tests/data/gpt_dataset_test.cc).

    megatron_gpt_samples.py PREFIX SEQ_LEN NUM_SAMPLES SEED OUT [FIRST END]
    megatron_gpt_samples.py cases DIR     each of CASES over DIR/megatron_uint16, to DIR/gpt_<name>.samples

Writes OUT: every sample megatron-core's GPTDataset (train split, the sequences [FIRST, END), default all) gives, in
its order, as little-endian int64 rows of SEQ_LEN + 1 tokens. NUM_SAMPLES -1: one epoch (num_samples None). Its
indices are cached in a temporary folder that is removed.
"""
import sys
import tempfile
import types

import numpy

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


def samples(prefix, seq, num, seed, out, first=None, end=None):
    corpus = IndexedDataset(prefix)
    first, end = (0, len(corpus)) if first is None else (first, end)
    # What GPTDatasetConfig asks of a tokenizer here: a vocabulary size and the ids it pads and ends documents with
    # (training samples are never padded: the last partial window is dropped).
    tokenizer = types.SimpleNamespace(vocab_size=65000, eod=0, pad=0, unique_identifiers={"class": "none"})
    with tempfile.TemporaryDirectory() as cache:
        config = GPTDatasetConfig(random_seed=seed, sequence_length=seq, split="1,0,0", path_to_cache=cache,
                                  tokenizer=tokenizer, reset_position_ids=False, reset_attention_mask=False,
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
    else:
        a = sys.argv
        samples(a[1], int(a[2]), int(a[3]), int(a[4]), a[5], *(int(v) for v in a[6:8]))
