// "auto" in a DeepSpeed config, resolved the way DeepSpeed's Hugging Face integration resolves it.
//
// Hugging Face's Trainer fills "auto" from the model's config and its TrainingArguments before
// DeepSpeed sees the file. A C++ program has neither, so it says what it knows in AutoValues
// (InitializeOptions::auto_values; ds_check_config --hidden_size / --set) and
// Config::resolve_auto fills what follows from it; what it does not say takes the value the Trainer
// fills with its default arguments (one printed line per value says which):
//   zero_optimization.reduce_bucket_size                 hidden_size^2
//   zero_optimization.stage3_prefetch_bucket_size        int(0.9 * hidden_size^2)   (stage 3)
//   zero_optimization.stage3_param_persistence_threshold 10 * hidden_size           (stage 3)
//   gradient_clipping                                    gradient_clipping, else 1.0 (max_grad_norm)
//   optimizer.params.lr, scheduler.params.warmup_max_lr  lr, else 5e-5 (learning_rate)
//   optimizer.params.betas / eps / weight_decay          [0.9, 0.999] / 1e-8 / 0.0
//   scheduler.params.warmup_min_lr                       0
//   scheduler.params.warmup_num_steps                    0 (warmup_steps)
//   scheduler.params.total_num_steps                     total_num_steps
//   fp16.enabled, bf16.enabled                           model_dtype, else false (no --fp16/--bf16)
//   train_micro_batch_size_per_gpu                       8 (per_device_train_batch_size), when the
//                                                        other batch keys cannot solve it
//   gradient_accumulation_steps                          1, likewise
// Below stage 3 the stage-3 keys are unused and keep DeepSpeed's default. An "auto" with no
// sensible default (the hidden-size ones, total_num_steps) is a ConfigError naming its JSON path
// and saying what to put there instead. Plain value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "deepspeed/config/precision_config.h"

namespace deepspeed::config {

struct AutoValues {
  std::optional<int64_t> hidden_size;  // the model's hidden size (HF: model.config.hidden_size)
  std::optional<double> lr;            // the learning rate (HF: learning_rate)
  std::optional<double> gradient_clipping;  // the clipping norm, 0 = none (HF: max_grad_norm)
  std::optional<int64_t> total_num_steps;   // optimizer steps of the run (HF: max_steps)
  std::optional<DataType> model_dtype;      // the model's parameters' dtype (HF: --fp16 / --bf16)
};

// One "auto" that resolve_auto replaced: `path` became `value` (JSON text), because of `how`
// (e.g. "hidden_size^2, hidden_size 64").
struct AutoResolution {
  std::string path;
  std::string value;
  std::string how;
};

}  // namespace deepspeed::config
