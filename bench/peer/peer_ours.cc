// Our side of the peer benchmark (bench/peer/run_peer.sh): trains the reference GPT with
// deepspeed-cpp on the same batches and from the same initial weights as DeepSpeed 0.19.8 does in
// peer_ds.py, and prints one result line rank 0 writes for the driver:
//
//   build/bin/bench_peer_ours --export_init init.safetensors   # one process: the initial weights
//   build/bin/deepspeed --num_procs 2 build/bin/bench_peer_ours
//       --deepspeed_config bench/peer/configs/zero2.json       # (one command line)
//
//   peer_row side=ours label=... median_s=... base_mib=... vmhwm_mib=... loss=... steps=...
//
// With --model_dir DIR (run_peer.sh's MODEL=llama) it trains the Hugging Face Llama folder that
// peer_llama.py wrote instead (deepspeed/models/llama.h, loaded with load_hf_weights; at stage 3
// built under zero::Init with each decoder layer a unit, so each rank reads only its partitions).
//
// Same model: the GPT is built from --seed with per-layer generators (GPTConfig::init_seed), which
// gives the same values whether its blocks are ZeRO-3 units or not; --export_init writes exactly
// those values, so peer_ds.py loads them into its mirror of models/gpt.cc (peer_gpt.py). Same data:
// peer_tokens() below and peer_gpt.py's peer_tokens() are one integer generator (splitmix64)
// written twice; nothing random is drawn from a library.
//
// Measures, as peer_ds.py does: the median over the timed steps of the slowest rank's step time
// (forward + backward + step, every step started together after a barrier), the largest rank's
// resident memory before the model is built (after comm init and the batches) and its peak (VmHWM)
// read at the end of the run, and the last step's loss averaged over ranks. One configuration per
// process pair, so each peak is that configuration's.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "checkpoint/safetensors_writer.h"
#include "deepspeed/arguments.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/zero.h"
#include "gpt.h"

namespace {

namespace dc = deepspeed::comm;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string config_path;
  std::string export_init;  // write the initial weights here and exit (no distributed run)
  std::string label;
  std::string model_dir;  // an HF Llama folder instead of the reference GPT
  int64_t seq_len = 128;  // with model_dir (the GPT's is its config's, also 128)
  int64_t steps = 6;
  int64_t warmup = 2;
  int64_t seed = 1234;
};

// The model both sides train: bench_util.h's reference GPT (vocab 4096, hidden 384, 6 layers, 6
// heads, seq 128, untied head, biases, dropout 0), initialised from per-layer generators seeded
// with `seed`.
deepspeed::models::GPTConfig peer_gpt(int64_t seed) {
  deepspeed::models::GPTConfig cfg = deepspeed::bench::reference_gpt();
  cfg.init_seed = static_cast<uint64_t>(seed);
  return cfg;
}

// A field of /proc/self/status ("VmRSS", "VmHWM") in MiB.
double status_mib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  DS_CHECK(false, "/proc/self/status has no ", key);
  return 0.0;
}

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// [micro, seq_len + 1] tokens of this rank's micro-batch at `step`, as peer_gpt.py's peer_tokens()
// makes them: each row an arithmetic progression mod vocab (start and stride 1..31 drawn per
// sample), one token in eight replaced by a random one, so the loss falls over a few steps and two
// runs that drift apart show it.
at::Tensor peer_tokens(uint64_t seed, int64_t step, int rank, int world, int64_t micro,
                       int64_t seq_len, int64_t vocab) {
  at::Tensor out = at::empty({micro, seq_len + 1}, at::kLong);
  auto acc = out.accessor<int64_t, 2>();
  const uint64_t v = static_cast<uint64_t>(vocab);
  for (int64_t i = 0; i < micro; ++i) {
    const uint64_t sample = static_cast<uint64_t>((step * world + rank) * micro + i);
    const uint64_t base = splitmix64(seed ^ (sample * 0xD1B54A32D192ED03ull));
    const uint64_t start = base % v, stride = 1 + (base >> 32) % 31;
    for (int64_t j = 0; j <= seq_len; ++j) {
      const uint64_t r = splitmix64(base + static_cast<uint64_t>(j));
      acc[i][j] = static_cast<int64_t>(
          r % 8 == 0 ? (r >> 8) % v : (start + static_cast<uint64_t>(j) * stride) % v);
    }
  }
  return out;
}

// The initial parameters, by name, as one safetensors file (peer_gpt.py's load_safetensors reads
// it).
int export_init(const Args& args) {
  deepspeed::models::GPT model(peer_gpt(args.seed));
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& item : model->named_parameters()) {
    DS_CHECK(item.value().scalar_type() == at::kFloat, "--export_init: ", item.key(), " is not fp32");
    params.emplace_back(item.key(), item.value());
  }
  deepspeed::checkpoint::save_safetensors(args.export_init, params,
                                          {{"format", "pt"}, {"seed", std::to_string(args.seed)}});
  std::printf("bench_peer_ours: wrote %zu tensors (%lld parameters) to %s\n", params.size(),
              static_cast<long long>(model->config().num_parameters()), args.export_init.c_str());
  return 0;
}

int train(const Args& args) {
  DS_CHECK(!args.config_path.empty(), "pass --deepspeed_config FILE (or --export_init FILE)");
  at::set_num_threads(1);  // OMP_NUM_THREADS=1 as well (run_peer.sh): one intra-op thread per rank
  dc::init_distributed();
  const int rank = dc::get_rank();
  const int world = dc::get_world_size();
  auto config = deepspeed::Config::from_file(args.config_path);
  DS_CHECK(config.train_micro_batch_size_per_gpu.has_value(), args.config_path,
           ": set train_micro_batch_size_per_gpu (both sides build their batches from it)");
  const int64_t micro = *config.train_micro_batch_size_per_gpu;
  deepspeed::models::GPTConfig cfg = peer_gpt(args.seed);
  std::optional<deepspeed::models::LlamaConfig> llama_cfg;
  if (!args.model_dir.empty()) llama_cfg = deepspeed::models::LlamaConfig::from_file(args.model_dir + "/config.json");
  const int64_t seq_len = llama_cfg ? args.seq_len : cfg.seq_len;
  const int64_t vocab = llama_cfg ? llama_cfg->vocab_size : cfg.vocab_size;
  const int64_t total = args.warmup + args.steps;
  std::vector<at::Tensor> xs, ys;
  for (int64_t s = 0; s < total; ++s) {
    at::Tensor tokens = peer_tokens(static_cast<uint64_t>(args.seed), s, rank, world, micro, seq_len, vocab);
    xs.push_back(tokens.narrow(1, 0, seq_len).contiguous());
    ys.push_back(tokens.narrow(1, 1, seq_len).contiguous());
  }
  dc::barrier();
  const double base = status_mib("VmRSS");

  // Stage 3: every block (decoder layer) a unit, partitioned as soon as it is built (as
  // peer_ds.py builds under zero.Init).
  cfg.shard_blocks = config.zero.stage == 3;
  std::optional<deepspeed::models::GPT> model;
  std::optional<deepspeed::models::LlamaForCausalLM> llama;
  {
    deepspeed::zero::Init init(config);
    if (llama_cfg) {
      llama_cfg->shard_layers = config.zero.stage == 3;
      llama.emplace(*llama_cfg);
    } else {
      model.emplace(cfg);
    }
  }
  if (llama) deepspeed::models::load_hf_weights(**llama, args.model_dir);
  deepspeed::Engine engine = llama ? deepspeed::initialize(*llama, config) : deepspeed::initialize(*model, config);
  if (rank == 0 && config.optimizer) {
    // What src/runtime/optimizer.cc reads from the same keys (DeepSpeed's defaults where unset).
    const auto& p = config.optimizer->params;
    std::printf(
        "peer_optimizer side=ours label=%s deepspeed-cpp fused CPU %s adam_w_mode=%d "
        "weight_decay=%g lr=%g\n",
        args.label.c_str(), config.optimizer->type.c_str(),
        config.optimizer->type == "adamw" || p.get_bool("adam_w_mode", true) ? 1 : 0,
        p.get_number("weight_decay", 0.0), p.get_number("lr", 1e-3));
  }

  std::vector<double> times;
  double loss = 0.0;
  for (int64_t s = 0; s < total; ++s) {
    dc::barrier();
    const auto t0 = Clock::now();
    at::Tensor l = engine.forward(xs[static_cast<size_t>(s)].to(engine.device()), ys[static_cast<size_t>(s)].to(engine.device()));
    engine.backward(l);
    engine.step();
    if (s >= args.warmup) times.push_back(deepspeed::bench::seconds_since(t0));
    loss = l.item<double>();
  }
  deepspeed::bench::max_over_ranks(times);
  at::Tensor mean_loss = at::tensor({loss}, at::kDouble);
  dc::get_world_group().all_reduce(mean_loss, dc::ReduceOp::kSum);
  std::vector<double> mem = {base, status_mib("VmHWM")};
  deepspeed::bench::max_over_ranks(mem);
  if (rank == 0) {
    std::sort(times.begin(), times.end());
    const size_t n = times.size();
    const double median = n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    std::printf(
        "peer_row side=ours label=%s median_s=%.6f base_mib=%.1f vmhwm_mib=%.1f loss=%.9g "
        "steps=%lld "
        "threads=%d\n",
        args.label.c_str(), median, mem[0], mem[1], mean_loss.item<double>() / world,
        static_cast<long long>(total), at::get_num_threads());
    std::fflush(stdout);
  }
  dc::barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"deepspeed-cpp's side of the DeepSpeed peer benchmark (bench/peer/run_peer.sh)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  deepspeed::ConfigArguments ds;
  deepspeed::add_config_arguments(app, ds);
  app.add_option("--export_init", args.export_init,
                 "write the initial weights (safetensors) to this file and exit");
  app.add_option("--model_dir", args.model_dir,
                 "train this Hugging Face Llama folder (bench/peer/peer_llama.py) instead of the GPT");
  app.add_option("--seq_len", args.seq_len, "tokens per sample with --model_dir")->check(deepspeed::check_at_least(1));
  app.add_option("--label", args.label, "configuration name printed in the result line");
  app.add_option("--steps", args.steps, "timed steps")->check(deepspeed::check_at_least(1));
  app.add_option("--warmup", args.warmup, "untimed steps first")
      ->check(deepspeed::check_at_least(0));
  app.add_option("--seed", args.seed, "model and data seed");
  CLI11_PARSE(app, argc, argv);
  args.config_path = ds.deepspeed_config;
  try {
    return args.export_init.empty() ? train(args) : export_init(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_peer_ours: %s\n", e.what());
    return 1;
  }
}
