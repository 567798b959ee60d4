// offload_param "nvme" (ZeRO-Infinity's parameter offload) for stage 3: the model-dtype partitions
// of every unit but the persistent one live in one swap file per rank, each flat's partition at its
// own 4096-aligned extent (so every transfer may use O_DIRECT). A gather reads this rank's
// partition straight into its slice of the pooled gather buffer, which is all the memory a
// partition ever takes while swapped in; the optimizer step's publish writes the updated partitions
// back. The persistent unit's partitions stay in memory, and so do those of the units before it that fit in
// offload_param.max_in_cpu (lowp_ holds only them, at the tail of each group's partition space, where those units'
// flats are laid out last).
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "deepspeed/error.h"
#include "zero/stage3/stage3.h"
#include "zero/stage3/stage3_state.h"

namespace deepspeed::zero {

void Stage3::setup_param_swap(const std::vector<int64_t>& group_size) {
  const std::string& dir = options_.offload.param_swap_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DS_CHECK_T(ConfigError, !ec, "zero_optimization.offload_param.nvme_path: cannot create ", dir,
             ": ", ec.message());
  param_swap_file_ = std::make_unique<swap::SwapFile>(dir + "/params.swp", "zero_optimization.offload_param.nvme_path");
  param_file_ = param_swap_file_->io_path();
  param_io_ = std::make_unique<swap::AioHandle>(options_.offload.aio);
  const int64_t elem = static_cast<int64_t>(c10::elementSize(options_.precision.dtype));
  int64_t offset = 0;
  for (size_t g = 0; g < group_size.size(); ++g) lowp_base_[g] = group_size[g];
  // max_in_cpu: units from the last non-persistent one backwards stay in memory while their partitions fit, so the
  // in-memory flats of every group stay one tail (lowp_) behind the swapped ones.
  std::vector<bool> in_memory(units_.size(), false);
  int64_t budget = options_.offload.param_max_in_cpu;
  for (size_t u = units_.size(); u-- > 0;) {
    if (units_[u]->persistent) {
      in_memory[u] = true;
      continue;
    }
    int64_t elems = 0;
    for (const auto& f : units_[u]->flats) elems += f.layout.partition_size();
    if (elems > budget) break;
    budget -= elems;
    in_memory[u] = true;
  }
  for (size_t u = 0; u < units_.size(); ++u)
    for (auto& f : units_[u]->flats) {
      const int64_t part = f.layout.partition_size();
      if (in_memory[u]) {
        lowp_base_[f.group] = std::min(lowp_base_[f.group], f.group_offset);
        continue;
      }
      DS_CHECK_T(ConfigError, part <= options_.offload.param_buffer_elems,
                 "zero_optimization.offload_param.buffer_size: ", units_[u]->name, " has a partition of ", part,
                 " elements on this rank, more than buffer_size ", options_.offload.param_buffer_elems);
      f.swap_offset = offset;
      offset += swap::padded_bytes(part * elem);
    }
  // An accelerator's reads and writes pass through host buffers sized for the largest swapped partition.
  if (!options_.device.is_cpu()) {
    int64_t largest = 0;
    for (size_t u = 0; u < units_.size(); ++u)
      for (const auto& f : units_[u]->flats)
        if (f.swap_offset >= 0) largest = std::max(largest, f.layout.partition_size());
    param_staging_ = std::make_unique<swap::StagingRing>(options_.offload.param_buffer_count, largest,
                                                         options_.precision.dtype, options_.offload.param_swap_pin);
  }
  // The in-memory flats come last in every group (units are laid out in order, the persistent unit last), so
  // lowp_ needs only the tail from lowp_base_ on.
  for (size_t u = 0; u < units_.size(); ++u)
    if (!in_memory[u])
      for (auto& f : units_[u]->flats)
        DS_ASSERT(f.group_offset < lowp_base_[f.group], "in-memory flats must be last");
}

void Stage3::load_shard(const Flat& f, const at::Tensor& dst) {
  if (f.swap_offset < 0) {
    const bool async = shards_on_host() && options_.offload.param_pin_memory;
    dst.copy_(f.shard(*this), /*non_blocking=*/async);
    if (async) {
      host_reads_.record(dst.device());
    }
    return;
  }
  // Synchronous: the all-gather that follows sends these bytes. Issued when the gather is, so a
  // prefetched unit's partition is read ahead of its use.
  if (dst.device().is_cpu()) {
    param_io_->sync_pread(dst, param_file_, f.swap_offset);
    return;
  }
  // A device's gather buffer: the file is read into the ring's next host buffer, whose copy up runs while the next
  // read does (pinned: asynchronous; the ring waits for it before that buffer is read into again).
  at::Tensor staging = param_staging_->acquire(dst.numel()).view(dst.sizes());
  param_io_->sync_pread(staging, param_file_, f.swap_offset);
  dst.copy_(staging, /*non_blocking=*/param_staging_->pinned());
  param_staging_->fence(dst.device());
}

void Stage3::wait_host_reads() const {
  host_reads_.wait();
  // host_reads_ holds the latest record only, on whichever stream was current: the copy stream's earlier copies too.
  if (copy_stream_) copy_stream_->synchronize();
}

void Stage3::store_shard(const Flat& f, const at::Tensor& values) {
  at::NoGradGuard no_grad;
  if (f.swap_offset < 0) {
    wait_host_reads();
    f.shard(*this).copy_(values);
    return;
  }
  if (values.device().is_cpu()) {
    param_io_->sync_pwrite(values.to(options_.precision.dtype).contiguous(), param_file_, f.swap_offset);
    return;
  }
  // From a device: down into a ring buffer (a blocking copy: the write reads it next), then to the file.
  at::Tensor staging = param_staging_->acquire(values.numel()).view(values.sizes());
  staging.copy_(values);
  param_staging_->fence(values.device());
  param_io_->sync_pwrite(staging, param_file_, f.swap_offset);
}

void Stage3::remove_param_swap() noexcept {
  if (!param_io_) return;
  try {
    param_io_->wait();
  } catch (...) {
  }
  param_io_.reset();
  param_staging_.reset();
  param_swap_file_.reset();
}

}  // namespace deepspeed::zero
