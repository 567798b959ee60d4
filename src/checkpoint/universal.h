// DeepSpeed's universal checkpoint: every parameter whole, in a folder of its own, with its optimizer state, so it
// loads at any world size, ZeRO stage or partitioning (DeepSpeed's ds_to_universal writes it, its engine loads it with
// "checkpoint": {"load_universal": true}; ours does both, and reads and writes DeepSpeed's files).
//
//   <out>/zero/<parameter name>/fp32.pt       {"param": the fp32 master, in the parameter's shape}
//   <out>/zero/<parameter name>/<state>.pt    {"param": ...} per optimizer state (Adam: exp_avg, exp_avg_sq)
//   <out>/zero/<parameter name>/step.pt       the optimizer's step count (a 0-d float tensor, as torch's Adam keeps it)
//   <out>/zero/optimizer_state.pt             {"param_groups": [{"lr": ...}, ...], "ds_version": ...}
//   <out>/*model_states.pt                    the source's model files (counters, scheduler, buffers, client state)
//   <out>/../latest_universal                 the tag: <out>'s name
// Files are torch.save archives (Python's torch.load reads ours; ours reads Python's).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/deepspeed_tag.h"

namespace deepspeed::checkpoint {

// The DeepSpeed version whose universal layout we write (DeepSpeed's loader refuses an optimizer_state.pt without a
// version, and ZeRO-1 refuses one older than 0.3.17).
constexpr const char* kUniversalLayoutVersion = "0.19.8";
constexpr const char* kLatestUniversal = "latest_universal";

struct UniversalStats {
  int64_t params = 0;
  int64_t bytes = 0;  // tensor bytes written
  int ranks = 0;      // rank files read
};

// Converts <dir>/<tag> (tag empty: `latest`; ours, every stage of a pipeline's, or one Python DeepSpeed wrote) into
// the universal layout under
// `out_dir`, and writes <out_dir>/../latest_universal. Memory: one parameter's state at a time, whole. Throws
// CheckpointError naming the file on anything inconsistent.
UniversalStats write_universal(const std::string& dir, const std::string& tag, const std::string& out_dir,
                               FileSystem* fs = nullptr);

// <dir>/<tag> as a universal checkpoint, in the fp32 partition contract: one rank file holding every parameter whole
// (one group each) with its optimizer state, and the model file's entries (from a pipeline: its stages' modules
// merged, so any stage finds its buffers). Parameter names pass through `name_map`.
// `slicer` (when set) replaces each parameter's whole fp32 value and optimizer states by the part this rank holds
// (given the parameter's name after `name_map`; the identity for a parameter it keeps whole): a tensor-parallel engine
// takes its slices of the whole parameters, at any tensor-parallel size.
using ParamSlicer = std::function<at::Tensor(const std::string& name, const at::Tensor& whole)>;
ForeignTag read_universal(const std::string& dir, const std::string& tag, const CheckpointNameMap& name_map = {},
                          FileSystem* fs = nullptr, const ParamSlicer& slicer = {});

}  // namespace deepspeed::checkpoint
