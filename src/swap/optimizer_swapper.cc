#include "swap/optimizer_swapper.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "deepspeed/error.h"

namespace deepspeed::swap {
namespace {

// Sub-group file offsets must stay O_DIRECT-aligned: 1024 floats = 4096 bytes.
constexpr int64_t kElemAlign = kAioAlignment / 4;

}  // namespace

OptimizerSwapper::OptimizerSwapper(const OptimizerSwapperOptions& options, const std::vector<at::Tensor>& masters)
    : options_(options) {
  DS_CHECK(options_.num_states >= 0 && options_.num_states <= 2, "optimizer swapper: unsupported state count ",
           options_.num_states);
  DS_CHECK(options_.sub_group_size >= 1, "zero_optimization.sub_group_size must be >= 1, got ",
           options_.sub_group_size);
  int64_t largest = 0;
  for (const auto& m : masters) largest = std::max(largest, m.numel());
  sub_ = std::min(options_.sub_group_size, std::max<int64_t>(largest, 1));
  sub_ = (sub_ + kElemAlign - 1) / kElemAlign * kElemAlign;

  const int per_set = 1 + options_.num_states;
  const int sets_needed = options_.pipeline ? 3 : 1;
  const int sets_available = options_.buffer_count / per_set;
  DS_CHECK_T(ConfigError, sets_available >= sets_needed, "zero_optimization.offload_optimizer.buffer_count: ",
             options_.buffer_count, " buffers hold ", sets_available, " sub-group(s) of ", per_set,
             " tensors (master + ", options_.num_states, " states); ", options_.pipeline ? "pipelining needs " : "needs ",
             sets_needed * per_set, " or more");

  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  DS_CHECK_T(AioError, !ec, "cannot create NVMe swap directory '", options_.dir, "': ", ec.message(),
             " (check zero_optimization.offload_optimizer.nvme_path)");

  reader_ = std::make_unique<AioHandle>(options_.aio);
  writer_ = std::make_unique<AioHandle>(options_.aio);
  sets_.resize(sets_needed);
  for (auto& set : sets_)
    for (int t = 0; t < per_set; ++t) set.push_back(aligned_empty(sub_, at::kFloat));

  for (size_t g = 0; g < masters.size(); ++g) {
    const at::Tensor master = masters[g].contiguous();
    group_numels_.push_back(master.numel());
    for (int64_t off = 0; off < master.numel(); off += sub_) sub_groups_.push_back({g, off, std::min(sub_, master.numel() - off)});
  }
  // Initial contents: the master values, zeroed states (the kernels ignore incoming state on step 1 anyway).
  for (const auto& sg : sub_groups_) {
    auto buf = views(sg, 0);
    buf[0].copy_(masters[sg.group].contiguous().narrow(0, sg.offset, sg.length));
    for (int t = 1; t < per_set; ++t) buf[t].zero_();
    write(sg, 0);
    writer_->wait();
  }
}

OptimizerSwapper::~OptimizerSwapper() {
  try {
    if (reader_) reader_->wait();
    if (writer_) writer_->wait();
  } catch (const std::exception&) {
    // Destruction must not throw; the step that issued the I/O already reported any error.
  }
  for (size_t g = 0; g < group_numels_.size(); ++g)
    for (int t = 0; t <= options_.num_states; ++t) std::remove(file_of(g, t).c_str());
}

std::string OptimizerSwapper::file_of(size_t group, int tensor) const {
  static const char* kNames[] = {"master", "state0", "state1"};
  return options_.dir + "/group" + std::to_string(group) + "_" + kNames[tensor] + ".swp";
}

std::vector<at::Tensor> OptimizerSwapper::views(const SubGroup& sg, int set) const {
  std::vector<at::Tensor> out;
  for (const auto& t : sets_[set]) out.push_back(t.narrow(0, 0, sg.length));
  return out;
}

void OptimizerSwapper::read(const SubGroup& sg, int set) {
  auto buf = views(sg, set);
  for (size_t t = 0; t < buf.size(); ++t) reader_->async_pread(buf[t], file_of(sg.group, static_cast<int>(t)), sg.offset * 4);
}

void OptimizerSwapper::write(const SubGroup& sg, int set) {
  auto buf = views(sg, set);
  for (size_t t = 0; t < buf.size(); ++t) writer_->async_pwrite(buf[t], file_of(sg.group, static_cast<int>(t)), sg.offset * 4);
}

void OptimizerSwapper::step(const UpdateFn& update) {
  const size_t n = sub_groups_.size();
  if (n == 0) return;
  const bool pipelined = sets_.size() >= 3;
  auto state_views = [&](const std::vector<at::Tensor>& buf) {
    return std::vector<at::Tensor>(buf.begin() + 1, buf.end());
  };
  if (!pipelined) {
    for (const auto& sg : sub_groups_) {
      read(sg, 0);
      reader_->wait();
      auto buf = views(sg, 0);
      update(sg.group, sg.offset, buf[0], state_views(buf));
      write(sg, 0);
      writer_->wait();
    }
    return;
  }
  // Set i % 3 holds sub-group i: read i+1 ahead while updating i, writing i-1 behind.
  read(sub_groups_[0], 0);
  for (size_t i = 0; i < n; ++i) {
    reader_->wait();  // sub-group i is loaded
    writer_->wait();  // sub-group i-1 is written, so its set (the one i+2 will use) is free
    if (i + 1 < n) read(sub_groups_[i + 1], static_cast<int>((i + 1) % 3));
    auto buf = views(sub_groups_[i], static_cast<int>(i % 3));
    update(sub_groups_[i].group, sub_groups_[i].offset, buf[0], state_views(buf));
    write(sub_groups_[i], static_cast<int>(i % 3));
  }
  writer_->wait();
}

int64_t OptimizerSwapper::resident_bytes() const {
  int64_t bytes = 0;
  for (const auto& set : sets_)
    for (const auto& t : set) bytes += t.nbytes();
  return bytes;
}

int64_t OptimizerSwapper::file_bytes() const {
  int64_t bytes = 0;
  for (int64_t numel : group_numels_) bytes += padded_bytes(numel * 4) * (1 + options_.num_states);
  return bytes;
}

}  // namespace deepspeed::swap
