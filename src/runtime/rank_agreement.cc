#include "runtime/rank_agreement.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <random>

#include "deepspeed/checkpoint.h"
#include "deepspeed/error.h"

namespace deepspeed::runtime {

namespace ckpt = checkpoint;

void all_ranks_or_none(comm::ProcessGroup& world, const char* what,
                       const std::function<void()>& fn) {
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  if (world.size() > 1) {
    at::Tensor failed =
        at::tensor({error ? static_cast<int64_t>(world.rank()) : int64_t{-1}}, at::kLong);
    world.all_reduce(failed, comm::ReduceOp::kMax);
    if (error) std::rethrow_exception(error);
    const int64_t rank = failed.item<int64_t>();
    DS_CHECK_T(ckpt::CheckpointError, rank < 0, what, " failed on rank ", rank,
               " (its error message says why)");
  }
  if (error) std::rethrow_exception(error);
}

void check_same_on_all_ranks(comm::ProcessGroup& world, const std::string& value,
                             const char* what) {
  if (world.size() == 1) return;
  const auto h = static_cast<int64_t>(std::hash<std::string>{}(value) >> 1);
  at::Tensor t = at::tensor({h, -h}, at::kLong);
  world.all_reduce(t, comm::ReduceOp::kMax);
  DS_CHECK(t[0].item<int64_t>() == -t[1].item<int64_t>(), what,
           " differs between ranks (this rank: '", value,
           "'); every rank must pass the same value");
}

const char* dtype_name(at::ScalarType t) {
  return t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "fp16" : "fp32";
}

std::string make_run_id(comm::ProcessGroup& world) {
  at::Tensor id = at::zeros({2}, at::kLong);
  if (world.rank() == 0) {
    std::random_device rd;
    const auto now = std::chrono::system_clock::now().time_since_epoch().count();
    id[0] = static_cast<int64_t>((static_cast<uint64_t>(rd()) << 32 | rd()) >> 1);
    id[1] = static_cast<int64_t>(now);
  }
  if (world.size() > 1) world.broadcast(id, world.ranks()[0]);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%016llx-%016llx",
                static_cast<unsigned long long>(id[0].item<int64_t>()),
                static_cast<unsigned long long>(id[1].item<int64_t>()));
  return buf;
}

void remove_stale_checkpoint_files(const std::string& dir, const std::string& tag) {
  ckpt::StaleFileOptions options;
  options.keep_tag = tag;
  options.single_host = comm::get_local_world_size() == comm::get_world_size();
  try {
    const std::vector<std::string> removed = ckpt::remove_stale_files(dir, options);
    if (!removed.empty()) {
      std::printf(
          "deepspeed: save_checkpoint: removed %zu leftover(s) of interrupted saves in %s (%s%s)\n",
          removed.size(), dir.c_str(), removed[0].c_str(), removed.size() > 1 ? ", ..." : "");
      std::fflush(stdout);
    }
  } catch (const ckpt::CheckpointError& e) {
    std::fprintf(
        stderr,
        "deepspeed: warning: save_checkpoint: leftovers of interrupted saves stay in %s: %s\n",
        dir.c_str(), e.what());
  }
}

}  // namespace deepspeed::runtime
