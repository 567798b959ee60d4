// How many bytes of model states (parameters, gradients, fp32 master weights, optimizer states) one
// rank holds under each ZeRO stage, before a run: DeepSpeed's
// estimate_zero{2,3}_model_states_mem_needs, computed for the layout deepspeed-cpp's engine really
// allocates, plus the ZeRO paper's formulas for comparison.
//
// Our layout, per rank, with Ψ the flat group size, N the data-parallel world size and P =
// padded_numel(Ψ, N) (the flat group padded to a multiple of N, so each rank owns exactly P/N
// elements):
//
//   stage | params              | gradients   | master (fp32) | Adam states | working buffers
//   ------+---------------------+-------------+---------------+-------------+------------------------------
//     0   | wΨ                  | 4Ψ          | mΨ            | 8Ψ          | -
//     1   | wP                  | 4P          | mP/N          | 8P/N        | -
//     2   | wP                  | 4P/N        | mP/N          | 8P/N        | 2 x
//     reduce_bucket_size x 4 3   | wP/N                | 4P/N        | mP/N          | 8P/N |
//     largest_layer_params x w
//
// w = 4 for fp32 and 2 for bf16/fp16; m = 0 for fp32 (the fp32 parameters, or the rank's slice of
// them, ARE the master weights) and 4 for bf16/fp16. So for mixed precision K = 12 (4 master + 8
// Adam) as in the paper, but gradients cost 4 bytes per parameter, not the paper's 2: like
// DeepSpeed's bf16 optimizer we accumulate gradients in fp32. Stage 0 does not partition, so it is
// not padded.
//
// Optimizer offload (stages 1-3; DeepSpeed also needs ZeRO for it) moves the master weights and
// Adam states of the rank's partition to host memory (kCpu) or to NVMe (kNvme; they are swapped
// through host memory), and keeps the rank's fp32 gradient partition in host memory, where the CPU
// optimizer reads it. At stages 2 and 3 that partition is the only gradient storage, so the device
// keeps none; at stage 1 the device still accumulates full gradients. With offload an fp32 run
// needs its own fp32 master copy on the host (the device parameters cannot be updated in place by
// the CPU optimizer). Parameter offload (stage 3 only) moves the rank's parameter partition
// likewise. Not counted anywhere: activations, temporary buffers, the allocator's fragmentation,
// pinned swap buffers of NVMe offload, and the buckets of stages 0, 1 and 3.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepspeed::zero {

enum class Precision { kFp32, kBf16, kFp16 };
enum class OffloadTarget { kNone, kCpu, kNvme };

// Per-parameter alignment of our flat buffers (elements): each parameter starts at a multiple of
// it.
inline constexpr int64_t kFlatAlignment = 16;

// Bytes per rank. The first five fields are what stays resident on the device (the accelerator; on
// a CPU-only run that is host memory too); the offloaded_* fields are what offload moved off it.
struct MemoryEstimate {
  int64_t params = 0;
  int64_t gradients = 0;
  int64_t master_weights = 0;
  int64_t optimizer_states = 0;
  int64_t working_buffers = 0;  // stage 2 reduce buckets, stage 3 gathered largest layer
  int64_t offloaded_cpu = 0;    // host memory taken by offloaded states, gradients and parameters
  int64_t offloaded_nvme = 0;   // NVMe space taken by offloaded states and parameters

  // Device-resident bytes: params + gradients + master_weights + optimizer_states +
  // working_buffers. On a CPU-only run the offloaded_cpu bytes live in the same memory; add them
  // yourself (see host_and_device()).
  int64_t total() const;
  // total() + offloaded_cpu: all the RAM one rank needs when device and host are the same memory.
  int64_t host_and_device() const;
};

// Elements of a flat buffer holding parameters of these sizes, each aligned to kFlatAlignment
// elements, as the engine lays out a parameter group. This is the Ψ to pass below when you have the
// parameter list.
int64_t flat_numel(const std::vector<int64_t>& param_numels);

// `numel` rounded up to a multiple of `world_size`: the size of a flat group partitioned across the
// ranks.
int64_t padded_numel(int64_t numel, int world_size);

// Per-rank bytes of our engine's layout (see the table above). `num_params` is Ψ: the caller
// applies the per-parameter alignment (flat_numel) if it wants it exact; the padding to the world
// size is done here. `reduce_bucket_size` (elements) counts stage 2's two fp32 reduce buckets; 0
// leaves them out. Throws deepspeed::Error naming the argument for num_params < 1, num_ranks < 1,
// stage outside 0..3, offload at stage 0, parameter offload below stage 3, or negative sizes.
MemoryEstimate estimate_model_states_mem_needs(
    int64_t num_params, int num_ranks, int stage, Precision precision,
    OffloadTarget offload_optimizer = OffloadTarget::kNone,
    OffloadTarget offload_param = OffloadTarget::kNone, int64_t largest_layer_params = 0,
    int64_t reduce_bucket_size = 0);

// The ZeRO paper's figures for mixed-precision Adam (K = 12, split 4 master + 8 states), without
// padding (Ψ/N is rounded up): stage 0 (2+2+K)Ψ, stage 1 2Ψ+2Ψ+KΨ/N, stage 2 2Ψ+(2+K)Ψ/N, stage 3
// (2+2+K)Ψ/N. DeepSpeed's estimator prints these plus its own buffer allowances. Same argument
// checks as above.
MemoryEstimate estimate_model_states_mem_needs_paper(int64_t num_params, int num_ranks, int stage);

// Options for the printed table.
struct EstimateTableOptions {
  Precision precision = Precision::kBf16;
  OffloadTarget offload_optimizer = OffloadTarget::kNone;
  int64_t largest_layer_params = 0;
  int64_t reduce_bucket_size = 0;
  int num_nodes = 1;           // only to report host memory per node; num_ranks is the world size
  bool paper_formula = false;  // print the paper's figures instead of our layout's
};

// A human-readable table, one row per stage 0..3 (plus stage 3 with parameter offload when
// offloading): per-rank params / gradients / master / optimizer / buffers / device total, offloaded
// bytes, and host memory per node. Stage 0 cannot offload, so its row is always without offload.
// Throws like estimate_model_states_mem_needs, and when num_ranks is not a multiple of num_nodes.
std::string format_memory_estimates(int64_t num_params, int num_ranks,
                                    const EstimateTableOptions& options = {});

// "1.50 GiB", "17.17 MiB", "512 B": binary units with two decimals, as the table prints them.
std::string format_bytes(int64_t bytes);

const char* precision_name(Precision precision);        // "fp32", "bf16", "fp16"
const char* offload_target_name(OffloadTarget target);  // "none", "cpu", "nvme"

}  // namespace deepspeed::zero
