#include "swap/optimizer_swapper.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "deepspeed/error.h"

namespace deepspeed::swap {
namespace {

int64_t align_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Reserves a swap file's blocks in one go, so the file gets a few large extents even when several
// groups' files are written at once, and a full disk shows up at construction rather than midway
// through a step. File systems without fallocate are left as they are.
void preallocate(int fd, const std::string& path, int64_t bytes) {
  const int rc = ::fallocate(fd, 0, 0, bytes);
  const int err = errno;
  DS_CHECK_T(AioError, rc == 0 || (err != ENOSPC && err != EDQUOT), "cannot reserve ", bytes,
             " bytes for swap file '", path, "': ", std::strerror(err),
             " (free space under zero_optimization.offload_optimizer.nvme_path)");
}

}  // namespace

OptimizerSwapper::OptimizerSwapper(const OptimizerSwapperOptions& options,
                                   const std::vector<at::Tensor>& masters)
    : options_(options) {
  DS_CHECK(options_.num_states >= 0 && options_.num_states <= 2,
           "optimizer swapper: unsupported state count ", options_.num_states);
  DS_CHECK(options_.sub_group_size >= 1, "zero_optimization.sub_group_size must be >= 1, got ",
           options_.sub_group_size);
  for (at::ScalarType t : {options_.master_dtype, options_.state_dtype})
    DS_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
             "optimizer swapper: masters and states are fp32, bf16 or fp16, got ", c10::toString(t));
  // Pieces start at multiples of elem_align elements, so every tensor's piece starts O_DIRECT-aligned, in the
  // buffers and in the file, whatever its element size: 1024 elements with fp32 only, 2048 with a 16-bit tensor.
  const int64_t smallest = std::min(element_size(0), element_size(1));
  const int64_t elem_align = kAioAlignment / smallest;
  int64_t largest = 0;
  for (const auto& m : masters) largest = std::max(largest, m.numel());
  sub_ = std::min(options_.sub_group_size, std::max<int64_t>(largest, 1));
  sub_ = align_up(sub_, elem_align);
  // A slot carries at least one aio block per tensor, so slicing never makes requests smaller
  // than block_size; small sub-groups stay one slot per set.
  const int64_t block_elems =
      align_up(std::max<int64_t>(options_.aio.block_size / smallest, 1), elem_align);
  slice_ = align_up((sub_ + kSlicesPerSet - 1) / kSlicesPerSet, elem_align);
  slice_ = std::min(sub_, std::max(slice_, block_elems));
  const int64_t slices_per_set = sub_ / slice_;

  const int per_set = 1 + options_.num_states;
  const int sets_needed = options_.pipeline ? 3 : 1;
  const int sets_available = options_.buffer_count / per_set;
  DS_CHECK_T(ConfigError, sets_available >= sets_needed,
             "zero_optimization.offload_optimizer.buffer_count: ", options_.buffer_count,
             " buffers hold ", sets_available, " sub-group(s) of ", per_set, " tensors (master + ",
             options_.num_states, " states); ", options_.pipeline ? "pipelining needs " : "needs ",
             sets_needed * per_set, " or more");

  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  DS_CHECK_T(AioError, !ec, "cannot create NVMe swap directory '", options_.dir,
             "': ", ec.message(), " (check zero_optimization.offload_optimizer.nvme_path)");

  reader_ = std::make_unique<AioHandle>(options_.aio);
  writer_ = std::make_unique<AioHandle>(options_.aio);
  sets_.resize(static_cast<size_t>(sets_needed));
  for (auto& set : sets_) {
    for (int t = 0; t < per_set; ++t)
      set.push_back(aligned_empty(sub_, t == 0 ? options_.master_dtype : options_.state_dtype));
    for (int64_t j = 0; j < slices_per_set; ++j) {
      std::vector<at::Tensor> slot;
      for (const auto& buffer : set) slot.push_back(buffer.narrow(0, j * slice_, slice_));
      slots_.push_back(std::move(slot));
    }
  }

  lay_out_files(masters);
  write_initial(masters);
}

// One file per group, piece-major: [master | state0 | state1] of piece 0, then of piece 1, ... A step then reads the
// file front to back in one stream and writes it back in another, instead of hopping between three files (one per
// tensor) every piece, which turns one sequential pass into three interleaved ones at the device.
void OptimizerSwapper::lay_out_files(const std::vector<at::Tensor>& masters) {
  for (size_t g = 0; g < masters.size(); ++g) {
    const int64_t numel = masters[g].numel();
    group_numels_.push_back(numel);
    int64_t file_offset = 0;
    for (int64_t off = 0; off < numel; off += slice_) {
      const int64_t length = std::min(slice_, numel - off);
      pieces_.push_back({g, off, length, file_offset});
      file_offset += piece_bytes(length);
    }
    files_.push_back(
        std::make_unique<SwapFile>(options_.dir + "/group" + std::to_string(g) + ".swp",
                                   "zero_optimization.offload_optimizer.nvme_path"));
    preallocate(files_.back()->fd(), files_.back()->name(), file_offset);
  }
  read_ticket_.assign(pieces_.size(), 0);
  write_ticket_.assign(pieces_.size(), 0);
}

void OptimizerSwapper::write_initial(const std::vector<at::Tensor>& masters) {
  const int per_set = 1 + options_.num_states;
  // Initial contents: the master values, zeroed states (the kernels ignore incoming state on step
  // 1 anyway), streamed through the same ring of slots.
  try {
    std::vector<at::Tensor> contiguous;
    for (const auto& m : masters) contiguous.push_back(m.contiguous().view({-1}));
    for (size_t p = 0; p < pieces_.size(); ++p) {
      wait_slot_free(p);
      auto buf = views(p);
      buf[0].copy_(contiguous[pieces_[p].group].narrow(0, pieces_[p].offset, pieces_[p].length));
      for (int t = 1; t < per_set; ++t) buf[static_cast<size_t>(t)].zero_();
      write(p);
    }
    writer_->wait();
  } catch (...) {
    drain();
    throw;
  }
}

OptimizerSwapper::~OptimizerSwapper() {
  // Destruction must not throw; the step that issued the I/O already reported any error.
  // The files go with files_ (an unlinked one when its descriptor closes).
  drain();
}

std::string OptimizerSwapper::file_of(size_t group) const { return files_[group]->io_path(); }

std::vector<std::string> OptimizerSwapper::file_names() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->name());
  return out;
}

std::vector<std::string> OptimizerSwapper::io_paths() const {
  std::vector<std::string> out;
  for (size_t g = 0; g < group_numels_.size(); ++g) out.push_back(file_of(g));
  return out;
}

std::vector<at::Tensor> OptimizerSwapper::views(size_t piece) const {
  std::vector<at::Tensor> out;
  for (const auto& t : slots_[piece % slots_.size()])
    out.push_back(t.narrow(0, 0, pieces_[piece].length));
  return out;
}

int64_t OptimizerSwapper::element_size(size_t tensor) const {
  return static_cast<int64_t>(c10::elementSize(tensor == 0 ? options_.master_dtype : options_.state_dtype));
}

int64_t OptimizerSwapper::piece_bytes(int64_t length) const {
  int64_t bytes = 0;
  for (size_t t = 0; t <= static_cast<size_t>(options_.num_states); ++t)
    bytes += padded_bytes(length * element_size(t));
  return bytes;
}

int64_t OptimizerSwapper::tensor_offset(size_t p, size_t tensor) const {
  int64_t offset = pieces_[p].file_offset;
  for (size_t t = 0; t < tensor; ++t) offset += padded_bytes(pieces_[p].length * element_size(t));
  return offset;
}

void OptimizerSwapper::read(size_t p) {
  auto buf = views(p);
  for (size_t t = 0; t < buf.size(); ++t)
    reader_->async_pread(buf[t], file_of(pieces_[p].group), tensor_offset(p, t));
  read_ticket_[p] = reader_->submitted();
}

void OptimizerSwapper::write(size_t p) {
  auto buf = views(p);
  for (size_t t = 0; t < buf.size(); ++t)
    writer_->async_pwrite(buf[t], file_of(pieces_[p].group), tensor_offset(p, t));
  write_ticket_[p] = writer_->submitted();
}

void OptimizerSwapper::wait_slot_free(size_t p) {
  if (p >= slots_.size()) writer_->wait_for(write_ticket_[p - slots_.size()]);
}

void OptimizerSwapper::step(const UpdateFn& update) {
  try {
    run_step(update);
  } catch (const AioError& e) {
    drain();  // no request may still point into the pool when the caller sees the error
    throw AioError(with_file_names(e.what()));
  } catch (...) {
    drain();
    throw;
  }
}

std::string OptimizerSwapper::with_file_names(std::string message) const {
  for (const auto& f : files_) message = f->with_name(std::move(message));
  return message;
}

void OptimizerSwapper::run_step(const UpdateFn& update) {
  const size_t n = pieces_.size();
  const size_t slots = slots_.size();
  // How far reads run ahead of the update. With three or more slots one slot is left for the write
  // of the previous piece, so issuing a read never waits for a write queued just before; with two,
  // reading one ahead (after the previous write) still keeps the disk busy during the update.
  const size_t ahead = slots >= 3 ? slots - 2 : slots - 1;
  size_t next_read = 0;
  for (size_t p = 0; p < n; ++p) {
    const size_t last = std::min(n - 1, p + ahead);
    for (; next_read <= last; ++next_read) {
      wait_slot_free(next_read);
      read(next_read);
    }
    reader_->wait_for(read_ticket_[p]);
    auto buf = views(p);
    update(pieces_[p].group, pieces_[p].offset, buf[0],
           std::vector<at::Tensor>(buf.begin() + 1, buf.end()));
    write(p);
  }
  writer_->wait();
}

void OptimizerSwapper::drain() noexcept {
  for (AioHandle* h : {reader_.get(), writer_.get()}) {
    if (h == nullptr) continue;
    try {
      h->wait();
    } catch (const std::exception&) {
      // Already reported (or about to be rethrown) by the caller.
    }
  }
}

int64_t OptimizerSwapper::resident_bytes() const {
  int64_t bytes = 0;
  for (const auto& set : sets_)
    for (const auto& t : set) bytes += t.nbytes();
  return bytes;
}

int64_t OptimizerSwapper::file_bytes() const {
  int64_t bytes = 0;
  for (const auto& piece : pieces_) bytes += piece_bytes(piece.length);
  return bytes;
}

}  // namespace deepspeed::swap
