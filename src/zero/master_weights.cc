#include "zero/master_weights.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "zero/nonfinite.h"
#include "zero/global_norm.h"

namespace deepspeed::zero {
namespace {

at::Tensor my_slice(const FlatGroup& g) {
  return g.params_flat.narrow(0, g.layout.begin(g.layout.rank()), g.layout.partition_size());
}

// Encodes (group, element offset) so that a MIN all-reduce finds the first overflow in group order.
constexpr int64_t kGroupStride = int64_t{1} << 40;

}  // namespace

MasterWeights::MasterWeights(std::vector<FlatGroup>& groups, comm::ProcessGroup world, MasterWeightsOptions options)
    : groups_(groups), world_(std::move(world)), options_(options) {
  narrow_groups_ = has_narrow_groups();
  DS_CHECK(options_.allgather_bucket_elems >= 1, "allgather_bucket_size must be >= 1, got ",
           options_.allgather_bucket_elems);
  auto& acc = accelerator::get_accelerator();
  if (options_.external_masters) return;
  for (const auto& g : groups_) {
    at::Tensor slice = options_.partitioned ? my_slice(g) : g.params_flat;
    if (options_.offload_to_host) {
      auto host = [&](const at::Tensor& t) { return options_.pin_memory ? acc.pin_memory(t) : t; };
      // bf16 masters: the host copy and the gradients' host copy stay in the model's dtype (half the bytes moved).
      const at::ScalarType dtype = options_.model_dtype_masters ? slice.scalar_type() : at::kFloat;
      masters_.push_back(host(slice.to(at::kCPU, dtype, /*non_blocking=*/false, /*copy=*/true)));
      host_grads_.push_back(host(at::zeros({slice.numel()}, at::TensorOptions().dtype(dtype))));
      copies_ = true;
    } else if (slice.scalar_type() == at::kFloat || options_.model_dtype_masters) {
      masters_.push_back(slice);
    } else {
      masters_.push_back(slice.to(at::kFloat));  // fp32 master of a bf16/fp16 model
      copies_ = true;
    }
  }
  final_ranges_.resize(host_grads_.size());
}

int64_t MasterWeights::copy_bytes() const {
  int64_t bytes = 0;
  if (copies_)
    for (const auto& m : masters_) bytes += m.nbytes();
  return bytes;
}

int64_t MasterWeights::host_grad_bytes() const {
  int64_t bytes = 0;
  for (const auto& g : host_grads_) bytes += g.nbytes();
  return bytes;
}

std::vector<at::Tensor> MasterWeights::stage_grads(const std::vector<at::Tensor>& grads) {
  if (!options_.offload_to_host) return grads;
  grad_copies_.wait();
  for (size_t i = 0; i < grads.size(); ++i) {
    if (final_ranges_[i].empty()) {
      host_grads_[i].copy_(grads[i]);
      continue;
    }
    // The gaps between what backward copied (ranges may repeat if a window was reduced twice before this step).
    auto& ranges = final_ranges_[i];
    std::sort(ranges.begin(), ranges.end());
    int64_t done = 0;
    auto fill = [&](int64_t begin, int64_t end) {
      if (begin < end) host_grads_[i].narrow(0, begin, end - begin).copy_(grads[i].narrow(0, begin, end - begin));
    };
    for (const auto& [begin, end] : ranges) {
      fill(done, begin);
      done = std::max(done, end);
    }
    fill(done, grads[i].numel());
    ranges.clear();
  }
  return host_grads_;
}

void MasterWeights::copy_final_grads(size_t g, int64_t begin, const at::Tensor& final_grads) {
  if (!options_.offload_to_host || !options_.early_host_grads || g >= host_grads_.size()) return;
  if (!grad_copies_.copy(host_grads_[g].narrow(0, begin, final_grads.numel()), final_grads)) return;
  final_ranges_[g].emplace_back(begin, begin + final_grads.numel());
  final_grad_copies_ += final_grads.numel();
}

MasterWeights::~MasterWeights() { grad_copies_.wait(); }  // nothing is freed under a copy still reading it

void MasterWeights::forget_final_grads() {
  grad_copies_.wait();  // before the gradients they read are cleared
  for (auto& ranges : final_ranges_) ranges.clear();
}

bool MasterWeights::has_narrow_groups() const {
  for (const auto& g : groups_)
    if (copies_group(g, world_).size() != world_.size()) return true;
  return false;
}

double MasterWeights::global_norm(const std::vector<at::Tensor>& grads) const {
  if (!narrow_groups_) return zero::global_norm(grads, options_.partitioned ? &world_ : nullptr);
  // Some groups (MoE experts) differ between ranks: sum every rank's squares over the whole group, each element
  // counted once: a partition is held by one rank; a whole buffer by each of its group's ranks, so it is weighted
  // by 1 / copies.
  double sq = 0.0;
  for (size_t g = 0; g < grads.size(); ++g) {
    const double copies = options_.partitioned ? 1.0 : copies_group(groups_[g], world_).size();
    sq += zero::squared_norm(grads[g]) / copies;
  }
  at::Tensor t = at::tensor({sq}, at::kDouble);
  world_.all_reduce(t, comm::ReduceOp::kSum);
  return std::sqrt(t.item<double>());
}

std::optional<std::pair<size_t, size_t>> MasterWeights::first_overflow(const std::vector<at::Tensor>& grads) const {
  int64_t first = std::numeric_limits<int64_t>::max();
  for (size_t g = 0; g < grads.size() && first == std::numeric_limits<int64_t>::max(); ++g) {
    const int64_t local = first_nonfinite(grads[g]);
    if (local < 0) continue;
    const FlatGroup& fg = groups_[g];
    int64_t offset = options_.partitioned ? fg.layout.begin(fg.layout.rank()) + local : local;
    first = static_cast<int64_t>(g) * kGroupStride + offset;
  }
  if ((options_.partitioned || narrow_groups_) && world_.size() > 1) {
    at::Tensor t = at::tensor({first}, at::kLong);
    world_.all_reduce(t, comm::ReduceOp::kMin);
    first = t.item<int64_t>();
  }
  if (first == std::numeric_limits<int64_t>::max()) return std::nullopt;
  size_t g = static_cast<size_t>(first / kGroupStride);
  int64_t offset = first % kGroupStride;
  const auto& offsets = groups_[g].offsets;
  size_t index = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), offset) - offsets.begin());
  return std::make_pair(g, index == 0 ? 0 : index - 1);
}

void MasterWeights::write_slice(size_t group, int64_t offset, const at::Tensor& master) {
  at::NoGradGuard no_grad;
  my_slice(groups_.at(group)).narrow(0, offset, master.numel()).copy_(master);
}

at::Tensor MasterWeights::copy_back_slice(size_t group, int64_t offset, int64_t n) const {
  at::Tensor slice = options_.partitioned ? my_slice(groups_.at(group)) : groups_.at(group).params_flat;
  const at::ScalarType dtype = slice.scalar_type();
  if ((dtype != at::kBFloat16 && dtype != at::kHalf) || !slice.device().is_cpu()) return at::Tensor();
  return slice.narrow(0, offset, n);
}

at::Tensor MasterWeights::initial_master(size_t group) const {
  const FlatGroup& g = groups_.at(group);
  // In host memory: the optimizer swapper writes it to its files.
  return (options_.partitioned ? my_slice(g) : g.params_flat)
      .to(at::kCPU, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

bool MasterWeights::fuse_copy_back(const std::function<bool(const std::vector<at::Tensor>&)>& accept) {
  DS_ASSERT(copy_back_.empty(), "fuse_copy_back called twice");
  // bf16 masters are already the parameters' values: publish() copies them as they are.
  if (!options_.offload_to_host || masters_.empty() || options_.model_dtype_masters) return false;
  std::vector<at::Tensor> targets;
  for (const auto& g : groups_) {
    at::Tensor slice = options_.partitioned ? my_slice(g) : g.params_flat;
    const at::ScalarType dtype = slice.scalar_type();
    if (dtype != at::kBFloat16 && dtype != at::kHalf) return false;  // fp32 models copy fp32 masters as before
    if (slice.device().is_cpu()) {
      targets.push_back(slice);  // the partition itself: publish() has nothing left to copy
    } else {
      at::Tensor host = at::empty({slice.numel()}, slice.options().device(at::kCPU));
      targets.push_back(options_.pin_memory ? accelerator::get_accelerator().pin_memory(host) : host);
    }
  }
  if (!accept(targets)) return false;
  copy_back_ = std::move(targets);
  return true;
}

void MasterWeights::publish() { publish_impl(/*from_masters=*/false); }

void MasterWeights::restore_params() { publish_impl(/*from_masters=*/true); }

std::vector<zero::MasterFragment> MasterWeights::master_fragments() const {
  std::vector<zero::MasterFragment> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const FlatGroup& fg = groups_[g];
    std::vector<size_t> indices;
    std::vector<std::vector<int64_t>> shapes;
    for (size_t i = 0; i < fg.params.size(); ++i) {
      indices.push_back(i);
      shapes.push_back(fg.params[i].sizes().vec());
    }
    const int rank = fg.layout.rank();
    const int64_t begin = options_.partitioned ? fg.layout.begin(rank) : 0;
    const int64_t end = options_.partitioned ? fg.layout.end(rank) : fg.numel();
    zero::append_master_fragments(g, indices, fg.offsets, shapes, begin, end, /*base=*/0, out);
  }
  return out;
}

void MasterWeights::publish_impl(bool from_masters) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < groups_.size(); ++i) {
    FlatGroup& g = groups_[i];
    // With a fused copy-back the step already wrote the rounded masters: into the partition itself (nothing to
    // copy) or into a host buffer of the model's dtype.
    // External masters (nvme) were written by write_slice already; masters_ is empty then.
    at::Tensor mine = options_.partitioned ? my_slice(g) : g.params_flat;
    if (copies_) {
      const at::Tensor& source = copy_back_.empty() || from_masters ? masters_[i] : copy_back_[i];
      const bool written_in_place = source.data_ptr() == mine.data_ptr() && source.dtype() == mine.dtype();
      // From pinned host memory to a device in the same dtype (a fused copy-back, bf16/fp16 masters): without
      // blocking the host, ordered before the forward that reads the parameters; the next writer of `source` waits
      // (masters()). A conversion on the way (fp32 masters) goes through a pageable temporary: blocking.
      const bool async = !mine.is_cpu() && source.is_pinned() && source.scalar_type() == mine.scalar_type();
      if (!written_in_place) mine.copy_(source, async);
      if (!written_in_place && async) host_reads_.record(mine.device());
    }
    if (!options_.partitioned) continue;
    const int world = g.layout.world_size();
    if (world == 1) continue;
    comm::ProcessGroup copies = copies_group(g, world_);
    const int64_t part = g.layout.partition_size();
    if (options_.allgather_partitions && options_.allgather_bucket_elems >= part * world) {
      // One all-gather straight into the padded buffer, which is exactly world x partition; the input is this
      // rank's own slice of it (in place, as NCCL and Gloo allow: comm test AllGatherIntoTensorFromOwnSlice).
      copies.all_gather_into_tensor(g.params_flat, mine);
      continue;
    }
    const int64_t chunk =
        options_.allgather_partitions ? std::max<int64_t>(1, options_.allgather_bucket_elems / world) : part;
    if (!options_.allgather_partitions || comm::backend_capabilities().in_place_by_owner) {
      // Each owner broadcasts its updated slice, a chunk at a time, straight into every rank's buffer: the chunks
      // of the partitions are contiguous there, so nothing is staged. DeepSpeed's allgather_partitions=false (whole
      // partitions), and the form Gloo needs to avoid copies (chunks of allgather_bucket_size).
      for (int64_t pos = 0; pos < part; pos += chunk) {
        const int64_t len = std::min(chunk, part - pos);
        std::vector<comm::Work> works;
        for (int r = 0; r < world; ++r)
          works.push_back(copies.broadcast(g.params_flat.narrow(0, g.layout.begin(r) + pos, len), copies.ranks()[r],
                                           /*async_op=*/true));
        for (auto& w : works) w.wait();
      }
      continue;
    }
    at::Tensor gathered = at::empty({chunk * world}, g.params_flat.options());
    for (int64_t pos = 0; pos < part; pos += chunk) {
      const int64_t len = std::min(chunk, part - pos);
      at::Tensor out = gathered.narrow(0, 0, len * world);
      copies.all_gather_into_tensor(out, mine.narrow(0, pos, len));
      for (int r = 0; r < world; ++r)
        g.params_flat.narrow(0, g.layout.begin(r) + pos, len).copy_(out.narrow(0, r * len, len));
    }
  }
}

}  // namespace deepspeed::zero
