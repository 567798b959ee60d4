// Our side of the checkpoint crossover test (crossover_test.py): trains a small GPT (models/gpt.h, the model
// crossover_ds.py defines identically in Python) on crossover batches, optionally resuming from a checkpoint that
// Python DeepSpeed wrote, and prints each step's loss (mean over ranks) on rank 0:
//
//   crossover_loss step=<data step> loss=<%.9g>
//
//   crossover_program --export_init init.safetensors            # one process: the initial weights
//   deepspeed --num_procs 2 crossover_program --deepspeed_config c.json --steps M [--load_dir D] [--save_dir D
//       --save_at N]
//
// With --load_dir the run starts at the loaded checkpoint's global step and reads the batches from there on; its
// parameter names are DeepSpeed's (the same module paths), so no name map is needed. --save_at N saves after step N
// (and --save_dir at the end when N is not given).
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "deepspeed/arguments.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/zero.h"
#include "gpt.h"

namespace {

namespace dc = deepspeed::comm;

struct Args {
  std::string config_path, export_init, load_dir, save_dir;
  int64_t steps = 2;
  int64_t save_at = -1;
  int64_t layers = 2;  // another model, for the test of a checkpoint that does not match
  std::string strip_prefix;  // checkpoint names start with this (a Python wrapper module's attribute)
};

// The crossover GPT: small enough that a run takes seconds. crossover_ds.py's CROSSOVER_GPT has the same numbers.
deepspeed::models::GPTConfig crossover_gpt() {
  deepspeed::models::GPTConfig cfg;
  cfg.vocab_size = 64;
  cfg.seq_len = 16;
  cfg.layers = 2;
  cfg.hidden = 32;
  cfg.heads = 2;
  cfg.tied_head = false;
  cfg.init_seed = 1234;
  return cfg;
}

// [micro, seq_len + 1] tokens of `rank`'s micro-batch at data step `step`: each row counts up mod 8 from a start
// the sample's index gives, every fifth token shifted (crossover_ds.py's crossover_tokens makes the same). Eight of
// the vocabulary's tokens, in order: the loss falls fast (4.2 -> 2.3 in 8 steps), so a checkpoint whose weights or
// moments did not come across shows in the first steps after loading.
at::Tensor crossover_tokens(int64_t step, int rank, int world, int64_t micro, int64_t seq_len) {
  at::Tensor out = at::empty({micro, seq_len + 1}, at::kLong);
  auto acc = out.accessor<int64_t, 2>();
  for (int64_t i = 0; i < micro; ++i) {
    const int64_t sample = (step * world + rank) * micro + i;
    for (int64_t j = 0; j <= seq_len; ++j) acc[i][j] = (sample * 3 + j + (j % 5 == 4 ? sample : 0)) % 8;
  }
  return out;
}

int export_init(const Args& args) {
  deepspeed::models::GPT model(crossover_gpt());
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
  deepspeed::checkpoint::save_safetensors(args.export_init, params, {{"format", "pt"}});
  return 0;
}

int train(const Args& args) {
  at::set_num_threads(1);
  dc::init_distributed();
  const int rank = dc::get_rank(), world = dc::get_world_size();
  auto config = deepspeed::Config::from_file(args.config_path);
  const int64_t micro = config.train_micro_batch_size_per_gpu.value();
  deepspeed::models::GPTConfig cfg = crossover_gpt();
  cfg.layers = args.layers;
  cfg.shard_blocks = config.zero.stage == 3;
  std::optional<deepspeed::models::GPT> model;
  {
    deepspeed::zero::Init init(config);
    model.emplace(cfg);
  }
  deepspeed::Engine engine = deepspeed::initialize(*model, config);
  int64_t first = 0;
  if (!args.load_dir.empty()) {
    deepspeed::LoadCheckpointOptions options;
    if (!args.strip_prefix.empty())
      options.checkpoint_name_map = [prefix = args.strip_prefix](const std::string& name) {
        return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
      };
    const auto loaded = engine.load_checkpoint(args.load_dir, options);
    DS_CHECK(loaded.has_value(), "nothing loaded from ", args.load_dir);
    first = engine.global_steps();
    if (rank == 0) std::printf("crossover_loss_scale=%.9g\n", engine.loss_scale());
    // Client state: DeepSpeed keeps it beside its own keys in the model file.
    if (rank == 0 && loaded->client_state.contains("crossover_epoch"))
      std::printf("crossover_client_state crossover_epoch=%lld\n",
                  static_cast<long long>(loaded->client_state.at("crossover_epoch").toInt()));
  }
  for (int64_t s = first; s < first + args.steps; ++s) {
    at::Tensor tokens = crossover_tokens(s, rank, world, micro, cfg.seq_len);
    at::Tensor loss = engine.forward(tokens.narrow(1, 0, cfg.seq_len).contiguous(),
                                     tokens.narrow(1, 1, cfg.seq_len).contiguous());
    engine.backward(loss);
    engine.step();
    at::Tensor mean = at::tensor({loss.item<double>()}, at::kDouble);
    dc::get_world_group().all_reduce(mean, dc::ReduceOp::kSum);
    if (rank == 0) std::printf("crossover_loss step=%lld loss=%.9g\n", static_cast<long long>(s),
                               mean.item<double>() / world);
    if (!args.save_dir.empty() && (s + 1 == args.save_at || (args.save_at < 0 && s + 1 == first + args.steps))) {
      deepspeed::checkpoint::StateDict client = deepspeed::checkpoint::make_state_dict();
      client.insert("crossover_epoch", int64_t{7});  // as crossover_ds.py saves
      engine.save_checkpoint(args.save_dir, std::nullopt, client);
    }
  }
  std::fflush(stdout);
  dc::barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"the C++ side of the checkpoint crossover test"};
  deepspeed::ConfigArguments ds;
  deepspeed::add_config_arguments(app, ds);
  app.add_option("--export_init", args.export_init, "write the initial weights (safetensors) here and exit");
  app.add_option("--load_dir", args.load_dir, "resume from this checkpoint directory (its latest tag)");
  app.add_option("--save_dir", args.save_dir, "save a checkpoint here");
  app.add_option("--save_at", args.save_at, "save after this global step (default: at the end)");
  app.add_option("--strip_prefix", args.strip_prefix, "drop this prefix from the checkpoint's names when loading");
  app.add_option("--layers", args.layers, "transformer blocks (2: the crossover GPT)");
  app.add_option("--steps", args.steps, "steps to train")->check(deepspeed::check_at_least(0));
  CLI11_PARSE(app, argc, argv);
  args.config_path = ds.deepspeed_config;
  try {
    return args.export_init.empty() ? train(args) : export_init(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crossover_program: %s\n", e.what());
    return 1;
  }
}
