// ZeRO-Infinity's optimizer-state offload to NVMe: each group's master partition and optimizer
// states live in one file under `dir` (group<g>.swp), and a step streams them through a fixed pool
// of aligned buffers. Masters and states are fp32, or 16-bit where the config keeps them so
// (bf16/fp16 masters, bf16 optimizer states): each tensor in its own dtype, in memory and on disk.
// Resident memory for optimizer state is the pool, whatever the model's size.
// The file is laid out piece by piece ([master | states...] of each piece, 4096-padded), so a step
// reads it front to back and writes it back in order: two sequential streams, which a disk serves
// at its sequential speed, rather than one stream per tensor.
//
// The pool: one buffer set without pipelining, three with pipeline_read/pipeline_write (DeepSpeed's
// read i+1 / update i / write i-1), each set holding 1 + num_states tensors of sub_group_size
// elements. Each set is cut into up to kSlicesPerSet slots (a slot is never smaller than one aio
// block per tensor), and a step walks every group in slot-sized pieces through the ring of slots:
// reads run up to (slots - 2) pieces ahead, a piece's write proceeds while the next pieces are
// updated, and a slot is reused as soon as its own write has finished (AioHandle::wait_for: no
// queue drain between pieces). So the disk stays busy while the optimizer runs, even with one
// buffer set (DeepSpeed's default) and the same memory; only the first read and the last update
// and write are exposed. The update callback therefore sees pieces of at most slice_size()
// elements: fine for element-wise optimizers (Adam, Adagrad, Lion), which is what sub-groups
// already assume.
//
// The files are unlinked as soon as they are created (swap_file.h: their I/O goes through
// /proc/self/fd), so the disk space comes back however the process ends, SIGKILL and std::terminate
// included; a failed run never leaves gigabytes of swap behind.
//
// Not thread-safe: one swapper per engine, driven from the training thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "swap/aio.h"
#include "swap/swap_file.h"

namespace deepspeed::swap {

struct OptimizerSwapperOptions {
  std::string dir;     // created if missing; the files in it are unlinked at once (see above)
  int num_states = 2;  // optimizer state tensors per element (Adam: 2)
  at::ScalarType master_dtype = at::kFloat;  // bf16/fp16 with 16-bit masters
  at::ScalarType state_dtype = at::kFloat;   // bf16 with bf16_optimizer_states
  int64_t sub_group_size = 1000000000;
  int buffer_count = 4;   // buffers of sub_group_size elements in the pool (DeepSpeed's meaning)
  bool pipeline = false;  // pipeline_read || pipeline_write
  AioOptions aio;
};

class OptimizerSwapper {
 public:
  // Each buffer set is cut into at most this many slots.
  static constexpr int kSlicesPerSet = 4;

  // Writes every group's initial master (`masters[g]`, converted to master_dtype) and zeroed states to files. Throws
  // AioError / Error naming the directory or file when it cannot be created or written, and Error
  // naming buffer_count when the pool is too small for the requested pipelining.
  OptimizerSwapper(const OptimizerSwapperOptions& options, const std::vector<at::Tensor>& masters);
  ~OptimizerSwapper();
  OptimizerSwapper(const OptimizerSwapper&) = delete;
  OptimizerSwapper& operator=(const OptimizerSwapper&) = delete;

  // Called once per piece, in order of group and offset, with its group, element offset in the
  // group's partition, and the loaded buffers: `master` and `states` (num_states tensors) all of
  // the piece's length (at most slice_size()). The callback updates them in place; the swapper
  // writes them back. Every element of every group is passed exactly once per step. If a read or
  // write fails (AioError naming the file) or the callback throws, step() waits for the I/O in
  // flight and rethrows; the files then hold a partly updated state.
  using UpdateFn = std::function<void(size_t group, int64_t offset, const at::Tensor& master,
                                      const std::vector<at::Tensor>& states)>;
  void step(const UpdateFn& update);

  // Bytes of the buffer pool (what stays resident for optimizer state).
  int64_t resident_bytes() const;
  // Bytes in files.
  int64_t file_bytes() const;
  // Paths that open the swap files, one per group (for tools that sync or inspect them):
  // /proc/self/fd/<fd> while the files are unlinked, valid while the swapper lives.
  std::vector<std::string> files() const { return io_paths(); }
  // The names the files were created under (<dir>/group<g>.swp), as error messages give them.
  std::vector<std::string> file_names() const;
  // Elements per tensor in one buffer set (sub_group_size, capped by the largest group, aligned).
  int64_t sub_group_size() const { return sub_; }
  // Elements per tensor in one slot: the largest piece update() sees.
  int64_t slice_size() const { return slice_; }
  // Slots in the ring (buffer sets x slices per set).
  int slot_count() const { return static_cast<int>(slots_.size()); }
  const std::string& dir() const { return options_.dir; }

 private:
  struct Piece {
    size_t group;
    int64_t offset, length;  // elements within the group
    int64_t file_offset;     // bytes: where the piece's master starts in the group's file
  };
  std::string file_of(size_t group) const;
  std::vector<std::string> io_paths() const;
  // An aio error message with each /proc/self/fd path replaced by the file's name.
  std::string with_file_names(std::string message) const;
  // Byte offset of tensor `tensor` (0 = master) of piece `p` in its group's file.
  int64_t tensor_offset(size_t p, size_t tensor) const;
  // Bytes per element of tensor `tensor` (0 = master), and the file bytes one piece of `length` elements takes.
  int64_t element_size(size_t tensor) const;
  int64_t piece_bytes(int64_t length) const;
  std::vector<at::Tensor> views(size_t piece) const;
  // Queues the reads (or writes) of piece `p` in its slot and records the handle's ticket.
  void read(size_t p);
  void write(size_t p);
  // Blocks until slot p % slots is free for piece p: the write of piece p - slots has finished.
  void wait_slot_free(size_t p);
  // Construction: the pieces of every group and their swap files (preallocated), then the initial contents: the
  // master values and zeroed states (the kernels ignore incoming state on step 1 anyway), streamed through the slots.
  void lay_out_files(const std::vector<at::Tensor>& masters);
  void write_initial(const std::vector<at::Tensor>& masters);
  void run_step(const UpdateFn& update);
  // Waits for everything in flight, dropping errors (after a failure has already been thrown).
  void drain() noexcept;

  OptimizerSwapperOptions options_;
  int64_t sub_ = 0;
  int64_t slice_ = 0;
  std::vector<Piece> pieces_;
  std::vector<std::vector<at::Tensor>> sets_;   // [set][0 = master, 1.. = states], sub_ elements
  std::vector<std::vector<at::Tensor>> slots_;  // [slot][tensor]: slice_-element views into sets_
  std::vector<int64_t> read_ticket_, write_ticket_;  // per piece: handle tickets after its I/O
  std::vector<int64_t> group_numels_;
  std::unique_ptr<AioHandle> reader_, writer_;
  // After the handles: destroyed before them, which is fine (requests hold their own descriptors),
  // and on a throwing constructor too.
  std::vector<std::unique_ptr<SwapFile>> files_;
};

}  // namespace deepspeed::swap
