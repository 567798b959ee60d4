// deepspeed-cpp's front door: wrap a LibTorch model into a training Engine configured by a DeepSpeed JSON config.
//
//   auto engine = deepspeed::initialize(model, deepspeed::Config::from_file("ds_config.json"));
//   for (...) {
//     auto loss = engine.forward(input, target);  // the model's own forward signature
//     engine.backward(loss);                      // scaled by 1/gradient_accumulation_steps, grads reduced
//     engine.step();                              // optimizer + LR schedule at the accumulation boundary only
//   }
//
// initialize() starts the communication layer from the environment the launcher set (or a single-process world),
// resolves the batch arithmetic for the data-parallel world size, broadcasts rank 0's parameters so every rank
// starts identical, and builds the optimizer and LR scheduler the config names (or the caller's own, via
// InitializeOptions). Config features this build does not implement yet are rejected here with a message saying so.
//
// Thread-safety: an Engine is driven from one thread, in the same order on every rank, like any collective code.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/zero.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace deepspeed {

namespace runtime {
class LrScheduler;
}  // namespace runtime

// A caller-defined parameter group; unset values come from the config's optimizer params.
struct ParamGroup {
  std::vector<at::Tensor> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

struct InitializeOptions {
  // Empty: one group holding every parameter of the model that requires a gradient.
  std::vector<ParamGroup> param_groups;
  // A client optimizer used instead of the config's `optimizer` section (which must then be absent). It must
  // have been built over the model's parameters (or `param_groups`); the engine calls its step() at boundaries.
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  // A client LR scheduler used instead of the config's `scheduler` section (which must then be absent).
  std::shared_ptr<runtime::LrScheduler> lr_scheduler;
  // Optimizer steps the run will take, if known: the step log then shows progress (`step 40/200 (20%)`).
  int64_t total_steps = 0;
  // What fills the config's "auto" values, as Hugging Face's integration fills them: hidden_size for the ZeRO bucket
  // sizes, lr, gradient_clipping (total_num_steps defaults to total_steps). Any other "auto" is an error naming it.
  config::AutoValues auto_values;
  // Tokens in one sample (the sequence length of a language model), if the model has tokens: the step log and the
  // monitors then report tokens/s as well (samples/s x this).
  int64_t tokens_per_sample = 0;
  // The training loop reports the tokens each micro-batch trained (Engine::add_trained_tokens: the targets the loss
  // counts, without an SFT prompt's or padding), and tokens/s counts those instead. Set it on every rank: each step
  // then sums the count over the data-parallel ranks (one all-reduce of one number).
  bool count_trained_tokens = false;

  // For an engine that holds one part of a larger layout (the pipeline engine builds one per stage):
  // The ranks holding copies of this module, over which gradients are reduced and ZeRO partitions (null: the world).
  comm::ProcessGroup data_parallel_group;
  // The ranks holding the other parts of the same model replica (DeepSpeed's model-parallel group): the gradient
  // norm and the fp16 overflow decision are agreed over it, so every part clips and skips alike (null: none).
  comm::ProcessGroup model_parallel_group;
  // Parameters whose gradients are counted in the global norm by another rank of model_parallel_group (this rank's
  // copies of tied weights), so that a tied weight counts once, as in the undivided model.
  std::vector<at::Tensor> norm_excluded_params;
};

// What this rank holds for the model states, from the engine's own buffers (bytes). ZeRO shrinks the optimizer
// state and masters (stage 1) and the gradients (stage 2) to this rank's partition.
struct ModelStateBytes {
  int64_t params = 0;            // the model's parameters in its dtype: full at stages 0-2; at stage 3 this rank's
                                 // partitions plus the persistent parameters
  int64_t gradients = 0;         // gradients kept across the step (full at stages 0/1, partition at stage 2): fp32,
                                 // or the model's dtype with grad_accum_dtype / bf16_master_weights_and_grads
  int64_t master_weights = 0;    // fp32 master copies (0 when the parameters are their own masters: an fp32 model,
                                 // or bf16 ones with bf16_master_weights_and_grads)
  int64_t optimizer_states = 0;  // e.g. Adam's exp_avg and exp_avg_sq
  int64_t working_buffers = 0;   // stage 2's gradient staging buckets / stage 3's gathered-parameter pool in use
                                 // and hpZ's secondary partitions (held from a forward to its backward)
  // With offload_optimizer "cpu": the masters, optimizer states and host gradient copy, all in host memory; with
  // offload_param "cpu", the parameter partitions (already counted in the fields above; on a GPU they are not
  // device memory).
  int64_t offloaded_to_host = 0;
  int64_t total() const { return params + gradients + master_weights + optimizer_states + working_buffers; }
};

// What Engine::offload_states moves (DeepSpeed's OffloadStateTypeEnum).
enum class OffloadStateType {
  kOptimStates,           // the optimizer's state (e.g. Adam's moments)
  kHpParams,              // fp32 master weights
  kLpParams,              // the model-dtype parameters (their flat buffers or, at stage 3, partitions)
  kLpGrads,               // the fp32 gradient buffers kept across steps
  kContiguousGradBuffer,  // gradient staging: ours is released after every backward, so there is nothing to move
};

struct OffloadStatesOptions {
  std::vector<OffloadStateType> include;  // empty: all of them
  bool pin_memory = true;                 // pin the host copies where the accelerator can
};

// Engine::load_checkpoint's choices (DeepSpeed's keyword arguments of the same names).
struct LoadCheckpointOptions {
  std::optional<std::string> tag;        // default: the tag named in <dir>/latest
  bool load_optimizer_states = true;     // optimizer moments and step count
  bool load_lr_scheduler_states = true;  // the schedule's position (else it restarts from the config)
  bool load_module_only = false;         // weights only: no optimizer, scheduler, loss scale, counters or RNG
  // A checkpoint written by Python DeepSpeed names parameters and buffers as its Python module did; this maps each
  // of its names to this model's ("module.h.0.attn.c_attn.weight" -> "blocks.0.attn.qkv.weight"). Empty: names are
  // taken as they are. Names that still match nothing are listed in the error.
  std::function<std::string(const std::string&)> checkpoint_name_map;
};

struct LoadCheckpointResult {
  std::string path;                       // <dir>/<tag>
  checkpoint::StateDict client_state = checkpoint::make_state_dict();  // what save_checkpoint was given
};

class EngineImpl;

class Engine {
 public:
  Engine(torch::nn::AnyModule module, std::shared_ptr<EngineImpl> impl);

  // Runs the model's forward with its own arguments; returns what it returns (a tensor, usually the loss).
  template <typename... Args>
  at::Tensor forward(Args&&... args) {
    begin_forward();
    at::Tensor out = module_.forward(std::forward<Args>(args)...);
    end_forward();
    return out;
  }

  // Backward of `loss` scaled by 1/gradient_accumulation_steps (and the fp16 loss scale). Gradients are averaged
  // across data-parallel ranks in buckets launched while backward is still running (overlap_comm): at the
  // accumulation boundary for stages 0/1, every micro-step into this rank's partition for stage 2.
  void backward(const at::Tensor& loss);
  // At the accumulation boundary: fp16 overflow check (skip on every rank), unscale, clip, optimizer step on this
  // rank's partition, all-gather of the updated parameters (stages 1/2), LR schedule, zero gradients. Otherwise
  // only counts the micro-step.
  void step();
  // With InitializeOptions::count_trained_tokens: `tokens` trained on this rank by the current micro-batch (e.g.
  // (labels != -100).sum()); tokens/s in the step log, progress bar and monitors counts these, summed over the
  // data-parallel ranks. Under tensor parallelism every rank of a group reports its replica's count; under sequence
  // parallelism each rank its slice's.
  void add_trained_tokens(int64_t tokens);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const;

  // True when the next step() will update the parameters.
  bool is_gradient_accumulation_boundary() const;
  int64_t global_steps() const;
  int64_t micro_steps() const;
  // Samples consumed across all ranks (DeepSpeed's global_samples): train_batch_size per step, kept by checkpoints, so
  // a run resumed at another global batch positions its data by this, not by global_steps() * train_batch_size().
  int64_t global_samples() const;
  // Current learning rate of each parameter group.
  std::vector<double> get_lr() const;
  // L2 norm of the averaged gradients at the last boundary (before clipping); -1 before the first step and with
  // zero_optimization.compute_grad_norm false (DeepSpeed's None), +inf after a step skipped for an overflow.
  double get_global_grad_norm() const;
  // fp16: the current loss scale (1 without fp16) and the steps skipped because gradients overflowed.
  double loss_scale() const;
  int64_t skipped_steps() const;
  int zero_optimization_stage() const;
  // The dtype data-parallel gradient reductions use (DeepSpeed's engine.communication_data_type): the config's
  // communication_data_type, or seq_parallel_communication_data_type under sequence parallelism; fp32 when unset
  // (the gradients' own 16-bit dtype where they accumulate in it at stages 0 and 1: grad_accum_dtype, bf16 masters).
  at::ScalarType communication_data_type() const;
  ModelStateBytes model_state_bytes() const;

  // Moves the chosen model states out of accelerator memory into host memory (e.g. between RLHF phases) and back.
  // While offloaded, forward/backward/step throw. Stage 3's small persistent parameters stay where they are.
  void offload_states(const OffloadStatesOptions& options = {});
  void reload_states();
  // Bytes currently moved out by offload_states (0 when not offloaded).
  int64_t offloaded_state_bytes() const;
  // Stage 3's gather/prefetch/pool counters (zero at other stages, but for reduce_wait_ms and
  // host_grad_copies_in_backward); reset_stage3_peaks() restarts the peaks.
  zero::Stage3Stats stage3_stats() const;
  void reset_stage3_peaks();

  // Checkpoints in DeepSpeed's layout (include/deepspeed/checkpoint.h): <dir>/<tag>/mp_rank_00_model_states.pt
  // (module weights in the model's dtype at stages 0-2, and at stage 3 with
  // stage3_gather_16bit_weights_on_model_save, buffers, counters, LR scheduler, loss scaler, config,
  // client_state) and one zero_pp_rank_<r>_mp_rank_00_optim_states.pt per data-parallel rank (its fp32 master
  // partition, optimizer state, where each parameter's elements sit, RNG state); <dir>/latest names the tag last.
  // Every file is written crash-safely. Collective: every rank calls it, at a gradient accumulation boundary.
  // `tag` defaults to "global_step<N>". Returns the tag. If any rank fails to write, every rank throws.
  std::string save_checkpoint(const std::string& save_dir, const std::optional<std::string>& tag = std::nullopt,
                              const std::optional<checkpoint::StateDict>& client_state = std::nullopt,
                              bool save_latest = true);
  // Loads a checkpoint saved at any data-parallel world size and ZeRO stage into this engine's (parameters are
  // matched by name; each rank copies the elements of its own partition). Collective; at an accumulation boundary.
  // Returns nullopt, with a warning on rank 0, when no tag is given and <dir>/latest does not exist (DeepSpeed's
  // behaviour, so a script may always try to resume). Throws checkpoint::CheckpointError naming the file and key
  // when a file is missing, truncated, from another run or does not match this model.
  std::optional<LoadCheckpointResult> load_checkpoint(const std::string& load_dir,
                                                      const LoadCheckpointOptions& options = {});

  // The whole module in the model's dtype, as one torch state dict file <save_dir>/<save_filename> written by rank 0
  // (DeepSpeed's save_16bit_model). At stage 3 the parameters are gathered one unit at a time, and only when
  // zero_optimization.stage3_gather_16bit_weights_on_model_save is set: otherwise nothing is saved, rank 0 warns
  // and false is returned (save_checkpoint + ds_to_fp32 recover the weights then). Collective. A name ending in
  // ".safetensors" writes safetensors (transformers' model.safetensors: add config.json beside it for a folder
  // transformers loads, e.g. with models::write_hf_index), any other name torch's format.
  bool save_16bit_model(const std::string& save_dir, const std::string& save_filename = "pytorch_model.bin");

  int local_rank() const;
  // Where the model trains: this rank's accelerator device (cpu, or cuda:LOCAL_RANK). Move inputs here.
  c10::Device device() const;
  int global_rank() const;
  int world_size() const;
  int dp_world_size() const;
  // This rank's place among the ranks holding copies of its part of the model (the data-parallel group): the rank a
  // data sampler shards by. The global rank without tensor, sequence or pipeline parallelism; with
  // sequence_parallel_size P the P ranks sharing samples (global ranks r with the same r / P) share it.
  int dp_rank() const;
  // Ranks holding the parts of one model replica (tensor_parallel.autotp_size, or the pipeline's stages); 1 without.
  int mp_world_size() const;
  int64_t train_batch_size() const;
  int64_t train_micro_batch_size_per_gpu() const;
  int64_t gradient_accumulation_steps() const;

  const Config& config() const;
  std::shared_ptr<torch::nn::Module> module() const { return module_.ptr(); }
  // Parameters as the engine trains them (views into its flat buffers), in the model's order. At stage 3 they are
  // empty between uses; read them inside a zero::GatheredParameters scope.
  std::vector<at::Tensor> parameters() const;

 private:
  void begin_forward();
  void end_forward();

  torch::nn::AnyModule module_;
  std::shared_ptr<EngineImpl> impl_;
};

// The non-template entry point the overloads below forward to.
Engine initialize(torch::nn::AnyModule model, const Config& config, InitializeOptions options = {});

template <typename ModuleType>
Engine initialize(std::shared_ptr<ModuleType> model, const Config& config, InitializeOptions options = {}) {
  return initialize(torch::nn::AnyModule(std::move(model)), config, std::move(options));
}

// For TORCH_MODULE holders (e.g. `GPT model(cfg); initialize(model, cfg)`).
template <typename ModuleImpl>
Engine initialize(torch::nn::ModuleHolder<ModuleImpl>& model, const Config& config,
                  InitializeOptions options = {}) {
  return initialize(torch::nn::AnyModule(model.ptr()), config, std::move(options));
}

}  // namespace deepspeed
