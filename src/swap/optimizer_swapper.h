// ZeRO-Infinity's optimizer-state offload to NVMe: each group's fp32 master partition and optimizer states live in
// files under `dir`, and a step streams them through a fixed pool of aligned buffers, one sub-group
// (sub_group_size elements) at a time. With pipelining, sub-group i+1 is read while i is updated and i-1 written
// (three buffer sets); without, each sub-group is read, updated and written in turn (one set). Resident memory for
// optimizer state is the buffer pool, whatever the model's size.
//
// Not thread-safe: one swapper per engine, driven from the training thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/swap/aio.h"

namespace deepspeed::swap {

struct OptimizerSwapperOptions {
  std::string dir;              // created if missing; files are removed when the swapper is destroyed
  int num_states = 2;           // optimizer state tensors per element (Adam: 2)
  int64_t sub_group_size = 1000000000;
  int buffer_count = 4;         // buffers of sub_group_size floats in the pool (DeepSpeed's meaning)
  bool pipeline = false;        // pipeline_read || pipeline_write
  AioOptions aio;
};

class OptimizerSwapper {
 public:
  // Writes every group's initial fp32 master (`masters[g]`) and zeroed states to files. Throws AioError / Error
  // naming the directory or file when it cannot be created or written, and Error naming buffer_count when the pool
  // is too small for the requested pipelining.
  OptimizerSwapper(const OptimizerSwapperOptions& options, const std::vector<at::Tensor>& masters);
  ~OptimizerSwapper();
  OptimizerSwapper(const OptimizerSwapper&) = delete;
  OptimizerSwapper& operator=(const OptimizerSwapper&) = delete;

  // Called once per sub-group with its group, element offset in the group's partition, and the loaded buffers:
  // `master` and `states` (num_states tensors, undefined beyond) all of the sub-group's length. The callback updates
  // them in place; the swapper writes them back.
  using UpdateFn = std::function<void(size_t group, int64_t offset, const at::Tensor& master,
                                      const std::vector<at::Tensor>& states)>;
  void step(const UpdateFn& update);

  // Bytes of the buffer pool (what stays resident for optimizer state).
  int64_t resident_bytes() const;
  // Bytes in files.
  int64_t file_bytes() const;
  int64_t sub_group_size() const { return sub_; }
  const std::string& dir() const { return options_.dir; }

 private:
  struct SubGroup {
    size_t group;
    int64_t offset, length;
  };
  std::string file_of(size_t group, int tensor) const;
  void read(const SubGroup& sg, int set);
  void write(const SubGroup& sg, int set);
  std::vector<at::Tensor> views(const SubGroup& sg, int set) const;

  OptimizerSwapperOptions options_;
  int64_t sub_ = 0;
  std::vector<SubGroup> sub_groups_;
  std::vector<std::vector<at::Tensor>> sets_;  // [set][0 = master, 1.. = states], each sub_ floats
  std::vector<int64_t> group_numels_;
  std::unique_ptr<AioHandle> reader_, writer_;
};

}  // namespace deepspeed::swap
