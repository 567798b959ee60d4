// ZeRO++ on the reference GPT (13.8M parameters, bf16, stage 3 with its blocks as units): bytes each rank's
// collectives carry per step and step time, for plain stage 3 and each of qwZ, qgZ, hpZ alone and together, side by
// side in one run. Run as W ranks through the launcher (not a test):
//
//   deepspeed --num_procs 4 bench_zero_pp [--micro 4 --steps 4 --rounds 3]
//
// The baseline reduces gradients in bf16 (communication_data_type "bf16": what DeepSpeed does for a bf16 model), so
// the ratios are against DeepSpeed's own wire. Bytes come from one step under the comms logger (after a warm-up),
// split by op and by group size (hpZ's backward gathers run on groups of 2, at W >= 4). Time: every configuration's
// engine lives in the one process and rounds of --steps steps alternate between them, so the drift of a shared
// machine hits all alike; a step's time is the slowest rank's, the median over rounds. On a CPU box the wire is
// memory and quantizing costs arithmetic: the time column says what that costs here, not what a network saves.
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "gpt.h"

namespace {

struct Variant {
  std::string name;
  std::string zero_keys;
  std::unique_ptr<deepspeed::Engine> engine;
  deepspeed::models::GPT model{nullptr};
  double gather_world = 0, gather_group = 0, reduce = 0;  // bytes per step
  std::vector<double> seconds;                              // per round, per step
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ZeRO++ bytes and step time vs plain stage 3"};
  int64_t micro = 4, steps = 4, rounds = 3;
  app.add_option("--micro", micro, "micro-batch per rank");
  app.add_option("--steps", steps, "steps per timed block");
  app.add_option("--rounds", rounds, "timed blocks per configuration");
  int local_rank = 0;  // passed by the launcher; LOCAL_RANK in the environment is what is used
  app.add_option("--local_rank", local_rank, "set by the launcher");
  CLI11_PARSE(app, argc, argv);
  deepspeed::comm::init_distributed();
  const int w = deepspeed::comm::get_world_size(), rank = deepspeed::comm::get_rank();
  std::vector<Variant> variants;
  auto add = [&](const std::string& name, const std::string& keys) {
    Variant v;
    v.name = name;
    v.zero_keys = keys;
    variants.push_back(std::move(v));
  };
  add("stage 3", "");
  add("qwZ", ", \"zero_quantized_weights\": true");
  add("qgZ", ", \"zero_quantized_gradients\": true");
  if (w >= 4 && w % 2 == 0) add("hpZ 2", ", \"zero_hpz_partition_size\": 2");
  add("qwZ + qgZ", ", \"zero_quantized_weights\": true, \"zero_quantized_gradients\": true");
  if (w >= 4 && w % 2 == 0)
    add("all three", ", \"zero_quantized_weights\": true, \"zero_quantized_gradients\": true, "
                     "\"zero_hpz_partition_size\": 2");

  deepspeed::models::GPTConfig cfg = deepspeed::bench::reference_gpt();
  cfg.shard_blocks = true;
  at::manual_seed(100 + rank);
  const at::Tensor x = at::randint(cfg.vocab_size, {micro, cfg.seq_len}, at::kLong);
  const at::Tensor y = at::randint(cfg.vocab_size, {micro, cfg.seq_len}, at::kLong);
  for (Variant& v : variants) {
    const std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(micro) +
                             ", \"steps_per_print\": 1000000, \"gradient_clipping\": 0, \"bf16\": {\"enabled\": true},"
                             " \"communication_data_type\": \"bf16\","
                             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.0003}},"
                             " \"zero_optimization\": {\"stage\": 3, \"stage3_max_reuse_distance\": 0" +
                             v.zero_keys + "}}";
    at::manual_seed(1);
    v.model = deepspeed::models::GPT(cfg);
    v.engine =
        std::make_unique<deepspeed::Engine>(deepspeed::initialize(v.model, deepspeed::Config::from_string(json)));
  }
  auto step = [&](Variant& v) {
    v.engine->backward(v.engine->forward(x, y));
    v.engine->step();
  };
  deepspeed::comm::CommsLoggerOptions logging;
  logging.enabled = true;
  for (Variant& v : variants) {
    step(v);  // warm-up
    deepspeed::comm::configure_comms_logger(logging);
    deepspeed::comm::reset_comms_logger();
    step(v);
    for (const auto& g : deepspeed::comm::comms_group_stats()) {
      if (g.op.find("all_gather") != std::string::npos)
        (g.group_size == w ? v.gather_world : v.gather_group) += static_cast<double>(g.bytes);
      if (g.op.find("reduce_scatter") != std::string::npos || g.op.find("all_to_all") != std::string::npos)
        v.reduce += static_cast<double>(g.bytes);
    }
    deepspeed::comm::configure_comms_logger({});
  }
  for (int64_t r = 0; r < rounds; ++r)
    for (Variant& v : variants) {
      deepspeed::comm::barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < steps; ++s) step(v);
      std::vector<double> t{deepspeed::bench::seconds_since(t0) / steps};
      deepspeed::bench::max_over_ranks(t);
      v.seconds.push_back(t[0]);
    }
  if (rank == 0) {
    const Variant& base = variants[0];
    auto median = [](std::vector<double> s) {
      std::sort(s.begin(), s.end());
      return s[s.size() / 2];
    };
    std::printf("ZeRO++ on the reference GPT (13.8M, bf16, stage 3), %d ranks, micro %lld: per rank per step\n", w,
                static_cast<long long>(micro));
    std::printf("%-10s %14s %14s %9s %14s %9s %10s %7s\n", "config", "gather world", "gather group", "ratio",
                "reduce", "ratio", "step s", "ratio");
    const double base_gather = base.gather_world + base.gather_group;
    for (const Variant& v : variants) {
      const double t = median(v.seconds);
      std::printf("%-10s %12.2fMB %12.2fMB %9.3f %12.2fMB %9.3f %10.3f %7.2f\n", v.name.c_str(),
                  v.gather_world / 1e6, v.gather_group / 1e6, (v.gather_world + v.gather_group) / base_gather,
                  v.reduce / 1e6, v.reduce / base.reduce, t, t / median(base.seconds));
    }
    std::printf("gather ratio: all-gather bytes (world + groups) over plain stage 3's; reduce: the gradient\n"
                "reduction's bytes (reduce-scatter, or qgZ's all-to-alls) over plain's bf16 reduce-scatter.\n");
  }
  variants.clear();
  return 0;
}
