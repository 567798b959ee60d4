// train_llama --pipe_stages P: the model as a P-stage pipeline (deepspeed/models/llama_pipe.h), data parallel over
// world / P replicas. Each stage loads its own layers from --model_dir; stage 0 reads the token windows, the last
// stage their shifted targets, both from the sampler of their data-parallel replica. --save_hf: each stage's first
// data-parallel rank writes its shard of the folder, then rank 0 the index and config.json.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "training_batches.h"
#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/models/llama_pipe.h"
#include "deepspeed/pipe/engine.h"
#include "final_line.h"
#include "train_llama_args.h"

namespace examples {
namespace {

namespace dm = deepspeed::models;
namespace dsp = deepspeed::pipe;

// Each stage's parameters under transformers' names; a tied embedding once, from the first stage holding it.
std::function<std::string(const std::string&)> stage_names(const dm::LlamaConfig& cfg,
                                                           const dsp::PipelineModule& module) {
  const bool first_of_tie = !cfg.tie_word_embeddings || module->tied_stages("embed").front() == module->stage_id();
  return [cfg, first_of_tie](const std::string& n) {
    return n.rfind("tied_modules.", 0) == 0 && !first_of_tie ? std::string() : dm::llama_pipeline_hf_name(cfg, n);
  };
}

}  // namespace

int train_llama_pipeline(const TrainLlamaArgs& args, const deepspeed::Config& config) {
  if (args.tiled_mlp_compute || args.tiled_mlp_tokens > 0 || args.tiled_loss_tokens > 0)
    throw std::invalid_argument("--tiled_mlp_compute/--tiled_mlp_tokens/--tiled_loss_tokens: not with --pipe_stages");
  if (args.tp_size > 1 || args.sp_size > 1 || args.gradient_checkpointing)
    throw std::invalid_argument(
        "--pipe_stages does not combine with --tp_size, --sp_size or --gradient_checkpointing "
        "yet (pipeline.activation_checkpoint_interval checkpoints the layers)");
  const dm::LlamaConfig cfg = read_model_config(args);
  at::manual_seed(static_cast<uint64_t>(args.seed));
  dsp::PipelineModuleOptions o;
  o.layers = dm::llama_pipeline_layers(cfg);
  o.loss_fn = dm::llama_pipeline_loss;
  o.num_stages = args.pipe_stages;
  o.base_seed = static_cast<uint64_t>(args.seed);  // a random model is the same whichever stage builds a layer
  dsp::PipelineModule module(o);
  const auto names = stage_names(cfg, module);
  // Every stage holding the tied embedding loads it (pipe::initialize then makes the copies equal anyway).
  auto hf_name = [&cfg](const std::string& n) { return dm::llama_pipeline_hf_name(cfg, n); };
  if (!args.model_dir.empty()) dm::load_hf_weights(*module, args.model_dir, dm::HfLoadOptions{hf_name, true});
  deepspeed::InitializeOptions options;
  options.total_steps = args.steps;
  options.tokens_per_sample = args.seq_len;
  options.auto_values.hidden_size = cfg.hidden_size;
  auto engine = dsp::initialize(module, config, options);

  const int rank = deepspeed::comm::get_rank();
  const int data_rank = module->topology().get_coord(rank).get("data");
  const deepspeed::Engine& stage = engine.stage_engine();
  TrainingBatches data(args.data_path, args.megatron_data_path, args.sft_data_path, args.seq_len, args.steps,
                       static_cast<uint64_t>(args.seed), cfg.vocab_size, stage.train_micro_batch_size_per_gpu(),
                       stage.gradient_accumulation_steps(), data_rank, engine.dp_world_size());
  data.use_curriculum(config);
  if (data.has_curriculum())  // every stage would have to agree on each step's activation shapes
    throw std::invalid_argument("data_efficiency's sequence-length curriculum is not supported with pipeline stages");
  if (rank == 0)
    std::printf("train_llama: %s, %lld parameters, %d stages x %d data-parallel ranks, global batch %lld; %s\n",
                cfg.architecture.c_str(), static_cast<long long>(cfg.num_parameters()), engine.num_stages(),
                engine.dp_world_size(), static_cast<long long>(stage.train_batch_size()), data.describe().c_str());
  int64_t first_step = 0;
  if (!args.load_dir.empty()) {
    if (!engine.load_checkpoint(args.load_dir))
      throw std::runtime_error("--load_dir " + args.load_dir + ": no checkpoint");
    first_step = engine.global_steps();
    data.resume(stage.global_samples());
  }
  const auto start = std::chrono::steady_clock::now();
  double last_loss = 0.0;
  for (int64_t step = first_step; step < args.steps; ++step) {
    int64_t m = 0;
    at::Tensor loss = engine.train_batch([&] {
      auto [x, y] = data.micro_batch(m++);
      return dsp::MicroBatch{x, y};
    });
    last_loss = loss.item<double>();
    data.next();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The whole model's weights (each stage's once), for the norm and the folder.
  const auto weights = dm::gather_hf_weights(*module, cfg.dtype, names);
  at::Tensor sq = at::zeros({1}, at::kDouble);
  if (data_rank == 0)
    for (const auto& [name, t] : weights) sq += t.to(at::kDouble).pow(2).sum();
  deepspeed::comm::get_world_group().all_reduce(sq, deepspeed::comm::ReduceOp::kSum);
  print_final(engine.global_steps(), last_loss, sq.item<double>(),
              static_cast<double>((args.steps - first_step) * stage.train_batch_size() * args.seq_len), seconds);
  if (!args.save_dir.empty()) engine.save_checkpoint(args.save_dir);
  if (!args.save_hf.empty()) {
    if (data_rank == 0) dm::write_hf_shard(args.save_hf, weights, module->stage_id(), engine.num_stages());
    deepspeed::comm::barrier();
    if (rank == 0) {
      dm::write_hf_index(args.save_hf, engine.num_stages(), cfg.json);
      std::printf("train_llama: saved %s for transformers\n", args.save_hf.c_str());
    }
    deepspeed::comm::barrier();
  }
  return 0;
}

}  // namespace examples
