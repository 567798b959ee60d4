"""megatron-core's own IndexedDataset writer and reader, the reference for deepspeed::data::IndexedDataset
(tests/data/indexed_dataset_test.cc).

    megatron_indexed.py write DIR      megatron-core's IndexedDatasetBuilder writes DIR/megatron_uint16 and
                                       DIR/megatron_int32 (.bin/.idx) from corpus() below
    megatron_indexed.py check DIR      megatron-core's IndexedDataset reads DIR/ours_uint16 and DIR/ours_int32 (written
                                       by our IndexedDatasetBuilder from the same corpus()) and compares every sequence
                                       and document boundary; exit 1 on the first difference

corpus(vocab) is written twice, here and as test_corpus() in indexed_dataset_test.cc: a deterministic list of
documents, each a list of sequences of token ids (one document of three sequences, one with an empty sequence,
ids above 32767 so a signed 16-bit read shows).
"""
import os
import sys

import numpy
import torch

from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

VOCABS = {"uint16": (numpy.uint16, 65000), "int32": (numpy.int32, 200000)}


def corpus(vocab):
    docs = []
    for k in range(40):
        parts = 3 if k % 9 == 4 else 1
        doc = []
        for s in range(parts):
            length = 0 if (k == 13 and s == 1) else 1 + (k * 37 + s * 11) % 61
            doc.append([(k * 7919 + s * 104729 + j * 31) % vocab for j in range(length)])
        if k == 13:
            doc.append([5, 6, 7])
        docs.append(doc)
    return docs


def write(out):
    for name, (dtype, vocab) in VOCABS.items():
        prefix = os.path.join(out, f"megatron_{name}")
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for doc in corpus(vocab):
            for seq in doc:
                builder.add_item(torch.tensor(seq, dtype=torch.int64))
            builder.end_document()
        builder.finalize(prefix + ".idx")


def check(out):
    for name, (dtype, vocab) in VOCABS.items():
        prefix = os.path.join(out, f"ours_{name}")
        ds = IndexedDataset(prefix, mmap=True)
        docs = corpus(vocab)
        want = [seq for doc in docs for seq in doc]
        if ds.index.dtype != dtype:
            sys.exit(f"{prefix}: megatron reads dtype {ds.index.dtype}, want {dtype}")
        if len(ds) != len(want):
            sys.exit(f"{prefix}: megatron reads {len(ds)} sequences, want {len(want)}")
        for i, seq in enumerate(want):
            got = ds[i].tolist()
            if got != seq:
                sys.exit(f"{prefix}: sequence {i}: megatron reads {got[:8]}... ({len(got)}), want {seq[:8]}... ({len(seq)})")
        bounds = [0]
        for doc in docs:
            bounds.append(bounds[-1] + len(doc))
        if ds.document_indices.tolist() != bounds:
            sys.exit(f"{prefix}: document indices {ds.document_indices.tolist()[:8]}..., want {bounds[:8]}...")
        print(f"{prefix}: megatron-core reads {len(ds)} sequences in {len(docs)} documents, all equal")


if __name__ == "__main__":
    os.makedirs(sys.argv[2], exist_ok=True)
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
