// Trains the reference GPT with deepspeed-cpp on byte-level text, as a DeepSpeed user's training script would:
//
//   deepspeed --num_procs 2 train_gpt --deepspeed_config examples/configs/gpt_zero0.json --steps 100
//
// Rank 0 prints the engine's step log, then one summary line that scripts and benchmarks compare runs by:
//   final step=<N> loss=<float> params_l2=<float> tokens_per_s=<float> peak_rss_mb=<float>
//
// --pipe_stages P trains the same GPT split into layers (models/gpt_pipe.h) as a P-stage pipeline, data parallel over
// the remaining ranks (train_gpt_pipe.cc). Both paths seed each layer with --seed + its index (GPTConfig::init_seed),
// so every P starts from the plain run's values and trains the same model.
//
// --tp_size T splits every block's attention heads and MLP width, the embedding and the head's vocabulary over T
// consecutive ranks (deepspeed::tp layers, Megatron's layout), data parallel over the remaining ranks; the config's
// tensor_parallel.autotp_size is set to T (or must equal it).
//
// --sp_size P splits each sequence over P consecutive ranks (Ulysses: models/gpt.h's attention exchanges them for
// whole sequences of heads / P heads), data parallel over the remaining ranks; sequence_parallel_size is set to P.
//
// --moe_experts E [--ep_size K --top_k k ...] makes the MLP of every other block a Mixture of Experts (models/gpt_moe.h),
// its experts split over K ranks; the loss includes the load-balancing term.
//
// Checkpoints: --save_dir DIR saves every --save_interval steps and after the last one; --load_dir DIR resumes from
// DIR's `latest` (weights, optimizer, schedule, counters; the data position is the global step). --steps counts
// global steps, so a run resumed at step 5 with --steps 10 runs 5 more. The checkpoint may come from another number
// of ranks or ZeRO stage, as long as the global batch (train_batch_size) is the same.
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "deepspeed/accelerator.h"
#include "deepspeed/arguments.h"
#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/moe/layer.h"
#include "deepspeed/sequence/layer.h"
#include "deepspeed/sequence/shard.h"
#include "deepspeed/tp/groups.h"
#include "deepspeed/tp/parallel_linear.h"
#include "deepspeed/zero.h"
#include "gpt.h"
#include "train_gpt_args.h"
#include "training_batches.h"

namespace examples {

int64_t resumed_step(const std::optional<deepspeed::LoadCheckpointResult>& loaded, int64_t global_steps,
                     const std::string& load_dir) {
  DS_CHECK(loaded.has_value(), "--load_dir ", load_dir, ": no checkpoint to resume from (no 'latest' file)");
  auto data_step = loaded->client_state.find("data_step");
  DS_CHECK(data_step != loaded->client_state.end() && data_step->value().toInt() == global_steps, "--load_dir ",
           load_dir, ": the checkpoint's data position does not match its global step ", global_steps);
  if (deepspeed::comm::get_rank() == 0)
    std::printf("train_gpt: resumed at step %lld\n", static_cast<long long>(global_steps));
  return global_steps;
}

deepspeed::checkpoint::StateDict data_position(int64_t done) {
  auto client = deepspeed::checkpoint::make_state_dict();
  client.insert("data_step", done);
  return client;
}

bool is_save_point(const TrainGptArgs& args, int64_t done) {
  return !args.save_dir.empty() && (done == args.steps || (args.save_interval > 0 && done % args.save_interval == 0));
}

}  // namespace examples

namespace {


using Args = examples::TrainGptArgs;

// With experts split over ranks (ep_size > 1) this rank holds only its own: add the squares of the experts the
// rest of its expert-parallel group holds, so params_l2 is the whole model's whatever the layout. Collective.
double other_experts_sq(torch::nn::Module& model) {
  double mine = 0.0;
  int ep_size = 1;
  for (const auto& m : model.modules()) {
    auto* experts = dynamic_cast<deepspeed::moe::ExpertsImpl*>(m.get());
    if (experts == nullptr || experts->ep_size() == 1) continue;
    ep_size = experts->ep_size();
    for (const auto& p : experts->parameters()) mine += p.detach().to(at::kDouble).pow(2).sum().item<double>();
  }
  if (ep_size == 1) return 0.0;
  at::Tensor t = at::tensor({mine}, at::kDouble);
  deepspeed::comm::ProcessGroup group = deepspeed::moe::expert_groups(ep_size).expert_parallel;
  group.all_reduce(t, deepspeed::comm::ReduceOp::kSum);
  return t.item<double>() - mine;
}

// With tensor parallelism this rank holds a slice of each split layer: add the squares of the slices the rest of its
// tensor-parallel group holds, so params_l2 is the whole model's whatever the layout. Collective.
double other_tensor_ranks_sq(const deepspeed::models::GPTImpl& model) {
  const deepspeed::comm::ProcessGroup& group = model.config().tensor_parallel;
  if (!group.is_member()) return 0.0;
  double mine = 0.0;
  for (const auto& p : deepspeed::tp::sharded_parameters(model))
    mine += p.detach().to(at::kDouble).pow(2).sum().item<double>();
  at::Tensor t = at::tensor({mine}, at::kDouble);
  const_cast<deepspeed::comm::ProcessGroup&>(group).all_reduce(t, deepspeed::comm::ReduceOp::kSum);
  return t.item<double>() - mine;
}

int train(const Args& args) {
  deepspeed::comm::init_distributed();
  const int rank = deepspeed::comm::get_rank();
  auto config = deepspeed::Config::from_file(args.config_path);
  if (args.pipe_stages > 0) {
    if (args.sp_size > 1) throw std::invalid_argument("--sp_size does not combine with --pipe_stages yet");
    if (args.model.moe.enabled())
      throw std::invalid_argument("--moe_experts does not combine with --pipe_stages (MoE runs on the plain engine)");
    return examples::train_pipeline(args, config);
  }

  at::manual_seed(static_cast<uint64_t>(args.seed));  // every rank builds the same initial model
  deepspeed::models::GPTConfig model_cfg = args.model;
  model_cfg.tied_head = !args.untied_head;
  model_cfg.moe.seed = static_cast<uint64_t>(args.seed);
  model_cfg.init_seed = static_cast<uint64_t>(args.seed);  // the pipeline path's layer seeds (--pipe_stages)
  // ZeRO stage 3: every block is a unit, partitioned as soon as it is built (no rank ever holds the whole model).
  // (Not MoE blocks, which are not units: with ep_size > 1 initialize() names stage 3 as unsupported; at ep_size 1
  // the model trains at stage 3 unpartitioned.)
  // (Nor a tensor-parallel model, which initialize() refuses at stage 3 by name.)
  model_cfg.shard_blocks = config.zero.stage == 3 && !model_cfg.moe.enabled() && args.tp_size <= 1 &&
                           config.tensor_parallel.autotp_size <= 1;
  // --tp_size T: the GPT is split over T consecutive ranks (Megatron's layout), data parallel over the rest.
  if (args.tp_size > 1) {
    if (config.tensor_parallel.autotp_size <= 1) config.tensor_parallel.autotp_size = args.tp_size;
    if (config.tensor_parallel.autotp_size != args.tp_size)
      throw std::invalid_argument("--tp_size " + std::to_string(args.tp_size) + " disagrees with the config's "
                                  "tensor_parallel.autotp_size " + std::to_string(config.tensor_parallel.autotp_size));
  }
  if (config.tensor_parallel.autotp_size > 1)
    model_cfg.tensor_parallel =
        deepspeed::tp::tensor_parallel_groups(config.tensor_parallel.autotp_size).tensor_parallel;
  // --sp_size P: each sequence split over P consecutive ranks (Ulysses), data parallel over the rest.
  if (args.sp_size > 1) {
    if (config.sequence_parallel_size <= 1) config.sequence_parallel_size = args.sp_size;
    if (config.sequence_parallel_size != args.sp_size)
      throw std::invalid_argument("--sp_size " + std::to_string(args.sp_size) + " disagrees with the config's "
                                  "sequence_parallel_size " + std::to_string(config.sequence_parallel_size));
  }
  const int sp = config.sequence_parallel_size;
  if (sp > 1) {
    model_cfg.sequence_parallel = deepspeed::sequence::sequence_parallel_groups(sp).sequence_parallel;
    if (model_cfg.seq_len % sp != 0)
      throw std::invalid_argument("--seq_len " + std::to_string(model_cfg.seq_len) +
                                  " must divide by the sequence-parallel size " + std::to_string(sp));
  }
  deepspeed::models::GPT model = [&] {
    deepspeed::zero::Init init(config);
    return deepspeed::models::GPT(model_cfg);
  }();

  deepspeed::InitializeOptions options;
  options.total_steps = args.steps;
  options.tokens_per_sample = args.model.seq_len;
  options.count_trained_tokens = true;  // tokens/s counts what trains (a curriculum's cut sequences)
  // "auto" bucket sizes and thresholds in a Hugging Face style config follow the model's width.
  options.auto_values.hidden_size = args.model.hidden;
  auto engine = deepspeed::initialize(model, config, options);

  examples::TrainingBatches batches(args.data_path, args.megatron_data_path, "", model_cfg.seq_len, args.steps,
                                    static_cast<uint64_t>(args.seed), model_cfg.vocab_size,
                                    engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps(),
                                    engine.dp_rank(), engine.dp_world_size());
  batches.use_curriculum(engine.config());
  if (rank == 0) {
    const std::string data = " x data parallel " + std::to_string(engine.dp_world_size()) + ")";
    std::string layout;
    if (engine.mp_world_size() > 1) layout = " (tensor parallel " + std::to_string(engine.mp_world_size()) + data;
    if (sp > 1) layout = " (sequence parallel " + std::to_string(sp) + data;
    std::printf("train_gpt: %lld parameters, %s, %d ranks%s, global batch %lld\n",
                static_cast<long long>(model_cfg.num_parameters()), batches.describe().c_str(), engine.world_size(),
                layout.c_str(), static_cast<long long>(engine.train_batch_size()));
    std::fflush(stdout);
  }

  int64_t first_step = 0;
  if (!args.load_dir.empty()) {
    auto loaded = engine.load_checkpoint(args.load_dir);  // before global_steps(): it sets them
    first_step = examples::resumed_step(loaded, engine.global_steps(), args.load_dir);
    batches.resume(engine.global_samples());  // the next sample, whatever the global batch was
  }
  const auto start = std::chrono::steady_clock::now();
  double last_loss = std::nan("");
  int64_t trained_tokens = 0;  // targets this rank's loss counted (its part of each sequence under Ulysses)
  for (int64_t step = first_step; step < args.steps; ++step) {
    double step_loss = 0.0;
    batches.begin_step(engine.global_steps() + 1);
    for (int64_t m = 0; m < engine.gradient_accumulation_steps(); ++m) {
      auto [x, y] = batches.micro_batch(m);
      if (sp > 1) {  // this rank's part of each sequence (a curriculum's cut padded to a multiple of sp)
        auto shard = deepspeed::sequence::shard_sequence(x, y, model_cfg.sequence_parallel);
        x = shard.input_ids;
        y = shard.labels;
      }
      const int64_t counted = (y != -100).sum().item<int64_t>();
      trained_tokens += counted;
      engine.add_trained_tokens(counted);
      at::Tensor loss = engine.forward(x.to(engine.device()), y.to(engine.device()));
      engine.backward(loss);
      engine.step();
      step_loss += loss.item<double>();
    }
    last_loss = step_loss / static_cast<double>(engine.gradient_accumulation_steps());
    batches.next();
    if (examples::is_save_point(args, step + 1))
      engine.save_checkpoint(args.save_dir, std::nullopt, examples::data_position(step + 1));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The summary: last step's loss averaged over ranks, the parameters' norm, throughput, the largest peak RSS.
  auto world = deepspeed::comm::get_world_group();
  at::Tensor loss_t = at::tensor({last_loss}, at::kDouble);
  world.all_reduce(loss_t, deepspeed::comm::ReduceOp::kAvg);
  double sq = 0.0;
  // One parameter at a time: at stage 3 each gathers only the unit that owns it, so the report never holds the
  // whole model (which would be this run's peak memory).
  for (const auto& p : engine.parameters()) {
    deepspeed::zero::GatheredParameters gathered({p});
    sq += p.detach().to(at::kDouble).pow(2).sum().item<double>();
  }
  sq += other_experts_sq(*model);
  sq += other_tensor_ranks_sq(*model);
  // Tokens that trained, each once: a curriculum's cut sequences at their length; every rank of a tensor-parallel
  // group counted its replica's whole micro-batch, a sequence-parallel rank its part.
  at::Tensor trained = at::tensor({static_cast<double>(trained_tokens)}, at::kDouble);
  world.all_reduce(trained, deepspeed::comm::ReduceOp::kSum);
  const double tokens = trained.item<double>() / static_cast<double>(std::max(1, config.tensor_parallel.autotp_size));
  examples::print_final(engine.global_steps(),
                        first_step < args.steps ? std::optional<double>(loss_t.item<double>()) : std::nullopt, sq,
                        tokens, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Train the reference GPT with deepspeed-cpp"};
  // A flag given twice (a script's default, then the user's) takes the last value, as Python's argparse does.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // --deepspeed, --deepspeed_config and the launcher's --local_rank (LOCAL_RANK in the env is what the library
  // reads). The config is checked after parsing, so a mistyped flag is reported as such rather than as a missing
  // config.
  deepspeed::ConfigArguments ds;
  deepspeed::add_config_arguments(app, ds);
  app.add_option("--data", args.data_path, "training text, byte-level (default: /usr/share/common-licenses)");
  app.add_option("--data_path", args.megatron_data_path,
                 "tokenized corpora, Megatron's data path: PREFIX (PREFIX.bin/.idx) or \"W1 PREFIX1 W2 PREFIX2 ...\"");
  app.add_option("--steps", args.steps, "optimizer steps")->check(deepspeed::check_at_least(1));
  app.add_option("--seed", args.seed, "model and data-order seed");
  auto* save_dir =
      app.add_option("--save_dir", args.save_dir, "save checkpoints here (every --save_interval steps and at the end)");
  app.add_option("--save_interval", args.save_interval, "steps between checkpoints (0: only at the end)")
      ->check(deepspeed::check_at_least(0))
      ->needs(save_dir);
  app.add_option("--load_dir", args.load_dir, "resume from this directory's latest checkpoint");
  app.add_option("--layers", args.model.layers, "transformer blocks")->check(deepspeed::check_at_least(1));
  app.add_option("--hidden", args.model.hidden, "hidden size")->check(deepspeed::check_at_least(1));
  app.add_option("--heads", args.model.heads, "attention heads")->check(deepspeed::check_at_least(1));
  app.add_option("--seq-len,--seq_len", args.model.seq_len, "tokens per sequence")->check(deepspeed::check_at_least(1));
  app.add_option("--vocab", args.model.vocab_size, "vocabulary size (>= 256 for byte tokens)")
      ->check(deepspeed::check_in_range(256, 1 << 20));
  app.add_option("--dropout", args.model.dropout, "dropout probability")->check(deepspeed::check_in_range(0, 0.99));
  app.add_flag("--untied_head", args.untied_head, "give the LM head its own weight");
  app.add_option("--tp_size", args.tp_size,
                 "split the GPT over this many ranks by tensor parallelism (data parallel over the remaining ranks)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--sp_size", args.sp_size,
                 "split each sequence over this many ranks (Ulysses; data parallel over the remaining ranks)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--tiled_mlp_tokens", args.model.tiled_mlp_tokens,
                 "run each block's MLP this many positions at a time (ALST's tiled MLP)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--tiled_loss_tokens", args.model.tiled_loss_tokens,
                 "compute the head's logits and loss this many positions at a time (never the whole logits)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--pipe_stages", args.pipe_stages,
                 "run as a pipeline of this many stages (data parallel over the remaining ranks)")
      ->check(deepspeed::check_at_least(1));
  auto* moe_experts = app.add_option("--moe_experts", args.model.moe.num_experts,
                                     "make every other block's MLP a Mixture of Experts with this many experts "
                                     "(one count, or one per MoE block, comma-separated: PR-MoE's pyramid)")
                          ->delimiter(',')
                          ->check(deepspeed::check_at_least(1));
  app.add_option("--ep_size", args.model.moe.ep_size, "expert-parallel ranks the experts are split over")
      ->check(deepspeed::check_at_least(1))
      ->needs(moe_experts);
  app.add_option("--top_k", args.model.moe.top_k, "experts per token")
      ->check(deepspeed::check_at_least(1))
      ->needs(moe_experts);
  app.add_option("--moe_capacity_factor", args.model.moe.capacity_factor, "expert capacity factor")
      ->check(deepspeed::check_at_least(1))
      ->needs(moe_experts);
  app.add_option("--moe_min_capacity", args.model.moe.min_capacity, "smallest expert capacity")
      ->check(deepspeed::check_at_least(0))
      ->needs(moe_experts);
  app.add_option("--moe_aux_loss_coef", args.model.moe.aux_loss_coef, "weight of the load-balancing loss")
      ->check(deepspeed::check_at_least(0))
      ->needs(moe_experts);
  app.add_option("--moe_noisy_gate_policy", args.model.moe.noisy_gate_policy, "None, Jitter or RSample")
      ->check(CLI::IsMember({"None", "Jitter", "RSample"}))
      ->needs(moe_experts);
  app.add_flag("--moe_use_residual", args.model.moe.use_residual, "Residual MoE (PR-MoE)")->needs(moe_experts);
  app.add_flag("!--moe_no_rts", args.model.moe.use_rts, "first-come instead of random token selection")
      ->needs(moe_experts);
  app.add_flag("!--moe_no_drop_tokens", args.model.moe.drop_tokens, "never drop tokens (capacity = largest load)")
      ->needs(moe_experts);
  CLI11_PARSE(app, argc, argv);
  if (ds.deepspeed_config.empty()) return app.exit(CLI::RequiredError("--deepspeed_config"));
  args.config_path = ds.deepspeed_config;
  try {
    return train(args);
  } catch (const deepspeed::ConfigError& e) {
    // What initialize() finds wrong with the config (the batch at this world size, a feature combination) names
    // the file as the config's own key errors do.
    const std::string message = e.what();
    const bool named = message.rfind(args.config_path + ":", 0) == 0;
    std::fprintf(stderr, "train_gpt: %s%s%s\n", named ? "" : args.config_path.c_str(), named ? "" : ": ",
                 message.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
}
