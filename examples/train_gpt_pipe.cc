// train_gpt --pipe_stages P: the reference GPT as a P-stage pipeline (DeepSpeed's PipelineModule of LayerSpecs),
// data parallel over world / P replicas. Stage 0 reads the token windows, the last stage their shifted targets;
// both draw the same indices from the sampler of their data-parallel replica. --save_dir/--load_dir write and read
// DeepSpeed's pipeline checkpoint layout (layer files plus each stage's engine state); a resume needs the same
// stage count. With --tp_size T each stage's layers are split over T tensor ranks (3D: pipe x data x model).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/error.h"
#include "deepspeed/pipe/engine.h"
#include "deepspeed/tp/groups.h"
#include "deepspeed/tp/parallel_linear.h"
#include "gpt_pipe.h"
#include "train_gpt_args.h"
#include "training_batches.h"

namespace examples {
namespace {

namespace dsp = deepspeed::pipe;

// Squared L2 norm of the whole model: each stage's parameters once (data-parallel replica 0 only), each tied
// module once (on the first stage that holds it), and with --tp_size each tensor rank's slices, the weights the
// layers keep whole on tensor rank 0 only.
double model_params_sq(const dsp::PipelineModule& module, int data_rank, int model_rank) {
  double sq = 0.0;
  std::set<const void*> split;
  for (const at::Tensor& p : deepspeed::tp::sharded_parameters(*module)) split.insert(p.unsafeGetTensorImpl());
  if (data_rank == 0) {
    std::vector<std::string> copies;  // prefixes of tied modules another stage counts
    for (const std::string& key : module->tied_keys())
      if (module->tied_stages(key).front() != module->stage_id()) copies.push_back("tied_modules." + key + ".");
    for (const auto& item : module->named_parameters()) {
      const std::string& name = item.key();
      if (std::any_of(copies.begin(), copies.end(), [&](const std::string& c) { return name.rfind(c, 0) == 0; }))
        continue;
      if (model_rank > 0 && split.count(item.value().unsafeGetTensorImpl()) == 0) continue;
      sq += item.value().detach().to(at::kDouble).pow(2).sum().item<double>();
    }
  }
  at::Tensor t = at::tensor({sq}, at::kDouble);
  deepspeed::comm::get_world_group().all_reduce(t, deepspeed::comm::ReduceOp::kSum);
  return t.item<double>();
}

}  // namespace

int train_pipeline(const TrainGptArgs& args, const deepspeed::Config& config) {
  const int rank = deepspeed::comm::get_rank();
  at::manual_seed(static_cast<uint64_t>(args.seed));  // as the plain path (dropout draws from the global generator)
  deepspeed::models::GPTConfig model_cfg = args.model;
  model_cfg.tied_head = !args.untied_head;
  // Each layer from its own generator, seeded as the plain path seeds GPT's layers: every stage count trains the
  // model plain train_gpt trains.
  model_cfg.init_seed = static_cast<uint64_t>(args.seed);

  dsp::PipelineModuleOptions o;
  // --tp_size T: each stage's layers split over T tensor ranks, the topology's "model" axis (3D).
  deepspeed::Config cfg = config;
  const int tp = std::max({args.tp_size, cfg.tensor_parallel.autotp_size, 1});
  DS_CHECK(cfg.tensor_parallel.autotp_size <= 1 || cfg.tensor_parallel.autotp_size == tp, "--tp_size ", args.tp_size,
           " disagrees with the config's tensor_parallel.autotp_size ", cfg.tensor_parallel.autotp_size);
  cfg.tensor_parallel.autotp_size = tp;
  const int world = deepspeed::comm::get_world_size();
  // (Without --tp_size the pipeline engine checks the stage count against the world itself.)
  DS_CHECK(tp == 1 || world % (args.pipe_stages * tp) == 0, "--pipe_stages ", args.pipe_stages, " x --tp_size ", tp,
           " must divide the world of ", world, " ranks");
  if (tp > 1) {
    model_cfg.tensor_parallel = deepspeed::tp::tensor_parallel_groups(tp).tensor_parallel;
    o.topology = dsp::PipeModelDataParallelTopology(args.pipe_stages, tp, world / (args.pipe_stages * tp));
  } else {
    o.num_stages = args.pipe_stages;
  }
  o.layers = deepspeed::models::gpt_pipeline_layers(model_cfg);
  o.loss_fn = deepspeed::models::gpt_pipeline_loss_fn(model_cfg);
  dsp::PipelineModule module(o);
  deepspeed::InitializeOptions options;
  options.total_steps = args.steps;
  options.tokens_per_sample = model_cfg.seq_len;
  options.auto_values.hidden_size = model_cfg.hidden;  // "auto" bucket sizes follow the model's width
  auto engine = dsp::initialize(module, cfg, options);

  const int data_rank = module->topology().get_coord(rank).get("data");
  const int model_rank = tp > 1 ? module->topology().get_coord(rank).get("model") : 0;
  const deepspeed::Engine& stage = engine.stage_engine();
  TrainingBatches data(args.data_path, args.megatron_data_path, "", model_cfg.seq_len, args.steps,
                       static_cast<uint64_t>(args.seed), model_cfg.vocab_size, stage.train_micro_batch_size_per_gpu(),
                       stage.gradient_accumulation_steps(), data_rank, engine.dp_world_size());
  data.use_curriculum(cfg);
  if (data.has_curriculum())  // every stage would have to agree on each step's activation shapes
    throw std::invalid_argument("data_efficiency's sequence-length curriculum is not supported with pipeline stages");
  if (rank == 0) {
    const std::string tensor = tp > 1 ? " x " + std::to_string(tp) + " tensor-parallel" : "";
    std::printf("train_gpt: %lld parameters, %s, %d stages x %d data-parallel%s ranks, global batch %lld\n",
                static_cast<long long>(model_cfg.num_parameters()), data.describe().c_str(), engine.num_stages(),
                engine.dp_world_size(), tensor.c_str(), static_cast<long long>(stage.train_batch_size()));
    std::fflush(stdout);
  }
  int64_t first_step = 0;
  if (!args.load_dir.empty()) {
    auto loaded = engine.load_checkpoint(args.load_dir);  // before global_steps(): it sets them
    first_step = resumed_step(loaded, engine.global_steps(), args.load_dir);
    data.resume(stage.global_samples());
  }
  const auto start = std::chrono::steady_clock::now();
  double last_loss = std::nan("");
  for (int64_t step = first_step; step < args.steps; ++step) {
    int64_t m = 0;
    at::Tensor loss = engine.train_batch([&] {
      auto [x, y] = data.micro_batch(m++);
      return dsp::MicroBatch{x, y};
    });
    last_loss = loss.item<double>();
    data.next();
    if (is_save_point(args, step + 1)) engine.save_checkpoint(args.save_dir, std::nullopt, data_position(step + 1));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double tokens =
      static_cast<double>(std::max<int64_t>(args.steps - first_step, 0) * stage.train_batch_size() * model_cfg.seq_len);
  print_final(engine.global_steps(), first_step < args.steps ? std::optional<double>(last_loss) : std::nullopt,
              model_params_sq(module, data_rank, model_rank), tokens, seconds);
  return 0;
}

}  // namespace examples
