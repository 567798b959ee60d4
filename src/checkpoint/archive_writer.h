// Streams a value into torch's zip format (what Python's torch.save writes and torch.load reads)
// without building the archive in memory.
//
// torch::pickle_save pickles into a vector, then copies every tensor's whole storage into a second
// vector that holds the archive, and only then can the caller write it: three passes over the
// bytes and twice the state's size in memory. Here the pickle (small: structure only) is built
// first, then the archive is written record by record: data.pkl, then one record per storage,
// data/<key>, each handed to the sink straight from the tensor's memory, as torch.save does. A
// view is written as a storage holding only the elements it covers (an alias of them, not a copy,
// when they are dense); only a tensor whose elements overlap or have gaps is copied.
//
// Thread-safety: no shared state; concurrent calls on different sinks are fine.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace deepspeed::checkpoint {

// Receives the archive's bytes in order. It may throw; the exception propagates out of
// write_torch_archive unchanged (its type is kept), and nothing more is handed to the sink.
using ArchiveSink = std::function<void(const char* data, size_t size)>;

// Writes `value` (CPU tensors or tensors that can be moved to the CPU, in any nesting of dicts,
// lists and tuples) as a torch zip archive. Returns the number of bytes handed to the sink.
int64_t write_torch_archive(const c10::IValue& value, const ArchiveSink& sink);

// The same archive with the pickle Python writes (checkpoint/python_pickle_writer.h: Python objects such as
// DeepSpeed's loss scaler or torch.Size, given as its marker dicts), for files Python DeepSpeed loads.
int64_t write_python_archive(const c10::IValue& value, const ArchiveSink& sink);

// `t` on the CPU with a storage holding exactly its elements (an alias when they are dense in a larger storage,
// a contiguous copy when they overlap or have gaps), so a writer of whole storages writes nothing else.
at::Tensor exact_storage(const at::Tensor& t);

// The archive as bytes (for callers that want it in memory); one copy of the tensor bytes.
std::vector<char> torch_archive_bytes(const c10::IValue& value);

// The first line of a LibTorch error message (c10::Error carries a backtrace; our errors promise one line).
std::string first_line(const char* what);

}  // namespace deepspeed::checkpoint
