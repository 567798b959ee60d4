// A unit partitioned as it was built, inside a zero::Init scope (DeepSpeed's zero.Init), before any engine exists:
// the unit's parameters are flattened, rank 0's values broadcast, this rank's partition kept and the full tensors
// freed. The engine later takes the unit over (materialize() gathers it back, one unit at a time); until then the
// unit refuses to run, and GatheredParameters can gather it for custom initialization.
//
// Thread-safety: collective; called from the one training thread in the same order on every rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/zero.h"
#include "zero/partition.h"

namespace deepspeed::zero {

// Where zero::Init keeps the partitions: on the accelerator's device, or in host memory (DeepSpeed's zero.Init under
// offload_param, remote_device "cpu"), pinned if asked. Collectives and gathers run on the device either way.
struct ConstructionPlace {
  bool host = false;
  bool pin = false;
};

class ConstructionShard : public detail::UnitHooks {
 public:
  // Partitions `unit`'s parameters now and installs itself as the unit's hooks.
  static void partition(UnitBase& unit, ConstructionPlace place = {});
  // The partition (tests: where it lives).
  const at::Tensor& shard() const { return shard_; }

  // Elements `param` has when whole (0 if it is not one of this unit's parameters).
  int64_t numel_of(const at::Tensor& param) const;
  // Each of this unit's parameters' shape when whole, by TensorImpl.
  void add_shapes(std::unordered_map<const void*, std::vector<int64_t>>& out) const;
  bool owns(const at::Tensor& param) const { return numel_of(param) > 0; }
  // Overwrites this rank's partition from full values read on demand: read(param, begin, count) returns elements
  // [begin, begin + count) of `param`'s flattened full value (any dtype: copied into the partition's). Reads only
  // what this rank owns; not collective. `done(param)`, when given, is called once its elements are copied.
  void load_partition(const std::function<at::Tensor(const at::Tensor& param, int64_t begin, int64_t count)>& read,
                      const std::function<void(const at::Tensor& param)>& done = nullptr);
  const std::vector<at::Tensor>& params() const { return params_; }
  // Collective: gives every parameter its full value again (in fresh memory).
  void gather();
  // Collective: with modifier_rank >= 0, takes that rank's full values; keeps this rank's partition and frees the
  // full tensors again.
  void scatter(int modifier_rank);
  // Gathers for good, each parameter in memory of its own (so parameters the engine keeps whole, e.g. persistent
  // ones, do not hold the whole unit alive): the engine takes over from here.
  void materialize();

  void pre_forward() override;
  at::Tensor post_forward(const at::Tensor& output) override { return output; }

 private:
  comm::ProcessGroup world_;
  std::vector<at::Tensor> params_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<int64_t> offsets_, numels_;
  PartitionLayout layout_;
  at::Tensor shard_;  // on the device, or in host memory (ConstructionPlace)
  at::Tensor full_;   // while gathered, on the device
  c10::Device device_ = c10::Device(c10::kCPU);  // where the model computes and collectives run
  bool materialized_ = false;
};

// Gathers every construction-time partition under `module` for good and turns its units back into
// pass-throughs (an engine at stage 0-2 trains the whole model on every rank).
void materialize_construction_shards(const std::shared_ptr<torch::nn::Module>& module);

// The shapes zero::Init's partitions under `module` had when whole, by TensorImpl (parameters not partitioned at
// construction are whole: their own sizes).
std::unordered_map<const void*, std::vector<int64_t>> construction_shapes(
    const std::shared_ptr<torch::nn::Module>& module);

}  // namespace deepspeed::zero
