// Fine-tunes (or trains from scratch) a Llama-family model from a Hugging Face folder with deepspeed-cpp, and hands
// the result back as a folder transformers loads:
//
//   deepspeed --num_procs 2 train_llama --model_dir Qwen2.5-0.5B --deepspeed_config examples/configs/llama_zero2.json \
//       --steps 100 --save_hf out/Qwen2.5-0.5B-tuned
//
// --model_dir DIR: config.json and the safetensors weights (deepspeed/models/llama.h, hf_checkpoint.h). --model_config
// FILE: a config.json alone, for random initial weights. The data is byte-level text (--data; the license texts every
// Debian machine ships by default), so the model's vocabulary must hold the 256 byte values. Rank 0 ends with the
// summary line of train_gpt (final_line.h); --save_hf writes the trained weights, in the config's dtype, with the
// config.json beside them. At ZeRO stage 3 the model is built under zero::Init with each decoder layer a unit, and
// each rank loads only its own partitions. --tp_size T splits the model over T consecutive ranks (Megatron's layout,
// tensor_parallel.autotp_size T), each loading only its slices; --sp_size P splits each sequence over P consecutive
// ranks (Ulysses, sequence_parallel_size P); --pipe_stages S runs it as an S-stage pipeline (train_llama_pipe.cc);
// data parallel over the remaining ranks.
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>

#include "deepspeed/arguments.h"
#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/sequence/layer.h"
#include "deepspeed/sequence/shard.h"
#include "deepspeed/tp/groups.h"
#include "deepspeed/tp/parallel_linear.h"
#include "deepspeed/zero.h"
#include "final_line.h"
#include "train_llama_args.h"
#include "training_batches.h"

namespace examples {

deepspeed::models::LlamaConfig read_model_config(const TrainLlamaArgs& args) {
  auto cfg = deepspeed::models::LlamaConfig::from_file(args.model_dir.empty() ? args.model_config
                                                                              : args.model_dir + "/config.json");
  if (args.megatron_data_path.empty() && cfg.vocab_size < 256)
    throw std::invalid_argument("the model's vocab_size " + std::to_string(cfg.vocab_size) +
                                " cannot hold byte-level tokens (256 values): give tokenized data with --data_path");
  return cfg;
}

}  // namespace examples

namespace {

namespace dm = deepspeed::models;
using Args = examples::TrainLlamaArgs;

dm::LlamaForCausalLM build_model(const Args& args, const deepspeed::Config& config) {
  dm::LlamaConfig cfg = examples::read_model_config(args);
  cfg.shard_layers = config.zero.stage == 3;
  cfg.gradient_checkpointing = args.gradient_checkpointing;
  cfg.tiled_mlp_tokens = args.tiled_mlp_tokens > 0 ? args.tiled_mlp_tokens
                         : args.tiled_mlp_compute  ? cfg.hidden_size
                                                   : 0;
  cfg.tiled_loss_tokens = args.tiled_loss_tokens;
  if (config.tensor_parallel.autotp_size > 1)
    cfg.tensor_parallel = deepspeed::tp::tensor_parallel_groups(config.tensor_parallel.autotp_size).tensor_parallel;
  if (config.sequence_parallel_size > 1)
    cfg.sequence_parallel =
        deepspeed::sequence::sequence_parallel_groups(config.sequence_parallel_size).sequence_parallel;
  at::manual_seed(static_cast<uint64_t>(args.seed));  // every rank builds the same initial model
  dm::LlamaForCausalLM model = [&] {
    deepspeed::zero::Init init(config);  // stage 3: each unit partitioned as it is built
    return dm::LlamaForCausalLM(cfg);
  }();
  if (!args.model_dir.empty()) dm::load_hf_weights(*model, args.model_dir);
  return model;
}

// The trained weights, whole (collective: partitions gathered, tensor-parallel slices joined), written by rank 0.
void save_hf(const Args& args, dm::LlamaForCausalLM& model) {
  const auto weights = dm::gather_hf_weights(*model, model->config().dtype);
  if (deepspeed::comm::get_rank() == 0) {
    dm::save_hf_folder(args.save_hf, weights, model->config().json);
    std::printf("train_llama: saved %s for transformers\n", args.save_hf.c_str());
  }
  deepspeed::comm::barrier();
}

int train(const Args& args) {
  deepspeed::comm::init_distributed();
  deepspeed::Config config = deepspeed::Config::from_file(args.config_path);
  // --tp_size T: the config's tensor_parallel.autotp_size is set to T (or must equal it).
  if (args.tp_size > 1 && config.tensor_parallel.autotp_size <= 1) config.tensor_parallel.autotp_size = args.tp_size;
  if (args.tp_size > 1 && config.tensor_parallel.autotp_size != args.tp_size)
    throw std::invalid_argument("--tp_size " + std::to_string(args.tp_size) + " disagrees with the config's " +
                                "tensor_parallel.autotp_size " + std::to_string(config.tensor_parallel.autotp_size));
  // --sp_size P: sequence_parallel_size is set to P (or must equal it); each rank trains on its part of each sequence.
  if (args.sp_size > 1 && config.sequence_parallel_size <= 1) config.sequence_parallel_size = args.sp_size;
  if (args.sp_size > 1 && config.sequence_parallel_size != args.sp_size)
    throw std::invalid_argument("--sp_size " + std::to_string(args.sp_size) + " disagrees with the config's " +
                                "sequence_parallel_size " + std::to_string(config.sequence_parallel_size));
  const int sp = config.sequence_parallel_size;
  if (args.seq_len % sp != 0)
    throw std::invalid_argument("--seq_len " + std::to_string(args.seq_len) +
                                " must divide by the sequence-parallel "
                                "size " +
                                std::to_string(sp));
  if (args.pipe_stages > 0) return examples::train_llama_pipeline(args, config);
  dm::LlamaForCausalLM model = build_model(args, config);
  deepspeed::InitializeOptions options;
  options.total_steps = args.steps;
  options.tokens_per_sample = args.seq_len;
  options.count_trained_tokens = true;  // the log's tokens/s counts the targets that train, not an SFT prompt's
  options.auto_values.hidden_size = model->config().hidden_size;
  auto engine = deepspeed::initialize(model, config, options);

  examples::TrainingBatches data(args.data_path, args.megatron_data_path, args.sft_data_path, args.seq_len, args.steps,
                                 static_cast<uint64_t>(args.seed), model->config().vocab_size,
                                 engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps(),
                                 engine.dp_rank(), engine.dp_world_size());
  data.use_curriculum(engine.config());
  if (engine.global_rank() == 0)
    std::printf("train_llama: %s, %lld parameters, %d ranks, global batch %lld of %lld tokens; %s\n",
                model->config().architecture.c_str(), static_cast<long long>(model->config().num_parameters()),
                engine.world_size(), static_cast<long long>(engine.train_batch_size()),
                static_cast<long long>(args.seq_len), data.describe().c_str());
  int64_t first_step = 0;
  if (!args.load_dir.empty()) {  // resume: weights, optimizer, schedule and counters; the data at the next sample
    if (!engine.load_checkpoint(args.load_dir))
      throw std::runtime_error("--load_dir " + args.load_dir + ": no checkpoint");
    first_step = engine.global_steps();
    data.resume(engine.global_samples());
  }
  const auto start = std::chrono::steady_clock::now();
  double last_loss = 0.0;
  int64_t trained_tokens = 0;  // targets the loss counted (an SFT prompt's do not)
  for (int64_t step = first_step; step < args.steps; ++step) {
    double step_loss = 0.0;
    data.begin_step(engine.global_steps() + 1);
    for (int64_t m = 0; m < engine.gradient_accumulation_steps(); ++m) {
      auto [x, y] = data.micro_batch(m);
      trained_tokens += (y != -100).sum().item<int64_t>();
      if (sp > 1) {  // this rank's part of each sequence (a curriculum's cut padded to a multiple of sp)
        auto shard = deepspeed::sequence::shard_sequence(x, y, model->config().sequence_parallel);
        x = shard.input_ids;
        y = shard.labels;
      }
      engine.add_trained_tokens((y != -100).sum().item<int64_t>());
      at::Tensor loss = engine.forward(x.to(engine.device()), y.to(engine.device()));
      engine.backward(loss);
      engine.step();
      step_loss += loss.item<double>();
    }
    last_loss = step_loss / static_cast<double>(engine.gradient_accumulation_steps());
    data.next();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  at::Tensor loss_t = at::tensor({last_loss}, at::kDouble);
  deepspeed::comm::get_world_group().all_reduce(loss_t, deepspeed::comm::ReduceOp::kAvg);
  // The parameters' norm over the whole model: tensor-parallel slices summed over their group, the rest once.
  std::set<const void*> split;
  for (const auto& p : deepspeed::tp::sharded_parameters(*model)) split.insert(p.unsafeGetTensorImpl());
  at::Tensor sq = at::zeros({2}, at::kDouble);  // {whole, split}
  for (const auto& p : engine.parameters()) {
    deepspeed::zero::GatheredParameters gathered({p});
    sq[split.count(p.unsafeGetTensorImpl()) ? 1 : 0] += p.detach().to(at::kDouble).pow(2).sum().item<double>();
  }
  if (model->config().tensor_parallel.is_member()) {
    at::Tensor part = sq.narrow(0, 1, 1).clone();
    deepspeed::comm::ProcessGroup group = model->config().tensor_parallel;
    group.all_reduce(part, deepspeed::comm::ReduceOp::kSum);
    sq[1] = part.item<double>();
  }
  // Tokens per second counts the tokens that trained, each once: every rank of a tensor- or sequence-parallel group
  // counted its replica's whole micro-batch.
  at::Tensor trained = at::tensor({static_cast<double>(trained_tokens)}, at::kDouble);
  deepspeed::comm::get_world_group().all_reduce(trained, deepspeed::comm::ReduceOp::kSum);
  const double replicas = static_cast<double>(engine.world_size()) / static_cast<double>(engine.dp_world_size());
  examples::print_final(engine.global_steps(), loss_t.item<double>(), sq.sum().item<double>(),
                        trained.item<double>() / replicas, seconds);
  if (!args.save_dir.empty()) engine.save_checkpoint(args.save_dir);
  if (!args.save_hf.empty()) save_hf(args, model);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Train a Llama-family model from a Hugging Face folder with deepspeed-cpp"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  deepspeed::ConfigArguments ds;
  deepspeed::add_config_arguments(app, ds);
  auto* dir = app.add_option("--model_dir", args.model_dir, "Hugging Face folder: config.json and safetensors");
  auto* cfg = app.add_option("--model_config", args.model_config, "config.json alone: random initial weights");
  dir->excludes(cfg);
  app.add_option("--data", args.data_path, "training text, byte-level (default: /usr/share/common-licenses)");
  app.add_option("--sft_data_path", args.sft_data_path,
                 "fine-tuning pairs: ds_preprocess --sft's output prefix (the loss counts only the responses)");
  app.add_option("--data_path", args.megatron_data_path,
                 "tokenized corpora, Megatron's data path: PREFIX (PREFIX.bin/.idx) or \"W1 PREFIX1 W2 PREFIX2 ...\"");
  app.add_option("--steps", args.steps, "optimizer steps")->check(deepspeed::check_at_least(1));
  app.add_option("--seq_len", args.seq_len, "tokens per sequence")->check(deepspeed::check_at_least(1));
  app.add_option("--seed", args.seed, "initial-weights and data-order seed");
  app.add_option("--save_hf", args.save_hf, "write the trained model here as a Hugging Face folder");
  app.add_option("--save_dir", args.save_dir, "save a DeepSpeed checkpoint here after the last step");
  app.add_option("--load_dir", args.load_dir, "resume from this directory's latest checkpoint (--steps counts all)");
  app.add_option("--tp_size", args.tp_size, "split the model over this many ranks by tensor parallelism")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--sp_size", args.sp_size, "split each sequence over this many ranks (Ulysses)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--pipe_stages", args.pipe_stages, "run as a pipeline of this many stages")
      ->check(deepspeed::check_at_least(1));
  app.add_flag("--gradient_checkpointing", args.gradient_checkpointing,
               "recompute each decoder layer in backward instead of keeping its activations");
  app.add_flag("--tiled_mlp_compute", args.tiled_mlp_compute,
               "run each MLP hidden_size positions at a time (ALST's tiled MLP)");
  app.add_option("--tiled_mlp_tokens", args.tiled_mlp_tokens, "run each MLP this many positions at a time")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--tiled_loss_tokens", args.tiled_loss_tokens,
                 "compute the head's logits and loss this many positions at a time (never the whole logits)")
      ->check(deepspeed::check_at_least(1));
  CLI11_PARSE(app, argc, argv);
  if (ds.deepspeed_config.empty()) return app.exit(CLI::RequiredError("--deepspeed_config"));
  if (args.model_dir.empty() && args.model_config.empty())
    return app.exit(CLI::RequiredError("--model_dir or --model_config"));
  args.config_path = ds.deepspeed_config;
  try {
    return train(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_llama: %s\n", e.what());
    return 1;
  }
}
