// Activation checkpointing (DeepSpeed's `deepspeed.checkpointing`): run a segment of the model
// without keeping its intermediate activations, and recompute it during backward.
//
//   namespace ckpt = deepspeed::checkpointing;
//   ckpt::configure(cfg);                                  // the config's
//   `activation_checkpointing` section for (auto& block : blocks) x = ckpt::checkpoint([&](const
//   at::Tensor& h) { return block(h); }, x);
//
// checkpoint(fn, inputs) runs `fn` with gradient recording off and keeps only its inputs. When
// backward reaches the segment it restores the random-number state captured at forward time (the
// CPU generator and, where the accelerator has one, the device generator), reruns `fn` with
// gradients on and back-propagates through it, so the gradients of the inputs and of every
// parameter `fn` uses equal those of a plain run, dropout included. Like DeepSpeed's default
// `checkpoint` this is the reentrant kind: backward runs a nested backward inside the segment, so
// parameter gradients are accumulated into `.grad` (torch::autograd::grad() over a checkpointed
// graph is refused). Outside grad mode (evaluation under NoGradGuard) `fn` just runs.
//
// Config keys (`activation_checkpointing`), all honoured:
//   partition_activations   - partitions saved inputs over the model-parallel group. deepspeed-cpp
//   has no model
//                             parallelism, so the group has one rank and the partition is the whole
//                             tensor: saved inputs are kept as flat views, as DeepSpeed does at
//                             mp=1. No memory is saved by it.
//   cpu_checkpointing       - saved floating-point inputs are copied to host memory (pinned where
//   the accelerator
//                             pins) and back to their device in backward. Inputs already on the CPU
//                             stay put.
//   contiguous_memory_optimization + number_checkpoints
//                           - saved floating-point inputs are copied into one preallocated buffer
//                           of
//                             `number_checkpoints` slots (sized by the first checkpoint), avoiding
//                             fragmentation. Requires partition_activations and number_checkpoints,
//                             as in DeepSpeed. More live checkpoints than slots is a ConfigError
//                             naming number_checkpoints.
//   synchronize_checkpoint_boundary - the accelerator is synchronized at every segment's forward
//   and backward. profile                 - forward, recompute and segment-backward times are
//   summed (runtime::Timers) and
//                             readable through stats().
//
// Not provided: DeepSpeed's non_reentrant_checkpoint (it needs saved-tensor hooks, which
// LibTorch 1.13 offers to Python only) and the model-parallel RNG tracker
// (model_parallel_cuda_manual_seed, get_cuda_rng_tracker), which has nothing to track without model
// parallelism.
//
// Thread-safety: configure/reset/stats may be called from any thread; the settings a segment uses
// are captured when its forward runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "deepspeed/config.h"

namespace deepspeed::checkpointing {

// A segment: tensors in, tensors out. Non-tensor arguments are captured by the closure; an
// undefined tensor may stand for an absent input. Inputs that do not require gradients (token ids,
// masks) are fine.
using SegmentFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// The core: runs `fn(inputs)` checkpointed and returns its outputs. Parameters `fn` uses receive
// gradients even when no input requires one.
std::vector<at::Tensor> checkpoint(const SegmentFn& fn, const std::vector<at::Tensor>& inputs);

// A single-tensor segment, e.g. a transformer block.
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn,
                      const at::Tensor& input);

namespace detail {
template <typename Fn, size_t... I>
at::Tensor call_with(const Fn& fn, const std::vector<at::Tensor>& in, std::index_sequence<I...>) {
  return fn(in[I]...);
}
}  // namespace detail

// A segment of several tensors returning one: checkpoint(fn, x, mask, ...) with fn(const
// at::Tensor&, ...).
template <
    typename Fn, typename... Rest,
    typename = std::enable_if_t<(std::is_convertible_v<const Rest&, const at::Tensor&> && ...)>>
at::Tensor checkpoint(Fn fn, const at::Tensor& first, const at::Tensor& second,
                      const Rest&... rest) {
  constexpr size_t kCount = 2 + sizeof...(Rest);
  SegmentFn core = [fn](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{detail::call_with(fn, in, std::make_index_sequence<kCount>{})};
  };
  return checkpoint(core, std::vector<at::Tensor>{first, second, rest...}).at(0);
}

// Applies the `activation_checkpointing` section. Throws ConfigError naming the key for a
// combination DeepSpeed refuses too (contiguous_memory_optimization without partition_activations
// or without number_checkpoints). Segments already run keep the settings they started with.
void configure(const config::ActivationCheckpointingConfig& settings);
void configure(const Config& config);
// True once configure() was called (checkpoint() works before that, with every option off).
bool is_configured();
// The settings in force.
config::ActivationCheckpointingConfig settings();

// Releases the contiguous buffers (memory still used by live checkpoints is freed when they finish)
// and zeroes stats() and the profile timers. Settings stay. DeepSpeed calls this between evaluation
// forwards that never run backward; here buffers slots are freed with the graphs that hold them, so
// it is only needed to give memory back.
void reset();

// What checkpointing holds and did, from its own accounting.
struct CheckpointStats {
  int64_t live_segments = 0;  // segments whose forward ran and whose backward has not finished
  int64_t saved_bytes =
      0;  // bytes of inputs those segments keep (their own copies, or the caller's tensors)
  int64_t peak_saved_bytes = 0;  // most saved_bytes seen since reset()
  int64_t host_saved_bytes = 0;  // part of saved_bytes moved to host memory by cpu_checkpointing
  int64_t contiguous_buffer_bytes = 0;  // allocated by contiguous_memory_optimization
  int64_t contiguous_slots_in_use = 0;
  int64_t forwards = 0;    // checkpointed forwards run (not counting plain runs outside grad mode)
  int64_t recomputes = 0;  // segments recomputed in backward
  int64_t synchronizations =
      0;  // accelerator synchronizations made for synchronize_checkpoint_boundary
  // With `profile`: milliseconds spent in checkpointed forwards, in recomputation, and in the
  // segments' backward (after recomputation). Nested segments are counted inside their outermost
  // one.
  double forward_ms = 0;
  double recompute_ms = 0;
  double backward_ms = 0;
};
CheckpointStats stats();

}  // namespace deepspeed::checkpointing
