// Step time of ZeRO-Offload (offload_optimizer "cpu"), of it with the optimizer step overlapped with the next step's
// forward and backward (offload_optimizer.overlap_step), with ZenFlow, with SuperOffload's speculative step (stage
// 3), and of ZeRO-Infinity's optimizer offload ("nvme") against no
// offload, on the reference GPT, in one process, as ratios:
//
//   build/bin/bench_offload_step [--steps 12 --block 2 --warmup 2 --dir /tmp --bf16 --stage 2 --micro 8 --no-nvme]
//                                [--vocab 4096 --seq-len 128 --layers 6 --hidden 384 --heads 6]
//                                [--kinds none,cpu,cpu+overlap --pin-memory]
//
// Up to six engines (AdamW, micro --micro, one rank or more through the launcher): no offload, offload_optimizer
// cpu, cpu with overlap_step, cpu with zenflow, cpu with super_offload (stage 3), nvme (files in a fresh directory
// under --dir, pipeline_read/write, --sub-group elements per sub-group, buffer_count 9). They are built from the
// same seed and fed the same batches, and timed in alternating blocks of --block steps (none, cpu, overlap,
// zenflow, super at stage 3, nvme, none, ...) so the drift of this shared machine hits all alike. Printed per
// configuration: median and best total step time (forward + backward + step) and the median of the engine.step()
// part alone, which is where the offloads differ; then the ratios of the medians, the optimizer step's share of the
// synchronous cpu step, and the share of it the overlap hides: (cpu total - overlap total) / cpu step() part. The
// last losses are printed as a check that the engines trained the same model on the same data (the overlapped one
// trains one step stale, so its loss differs a little). --kinds runs a subset (none and cpu always among them).
// On a GPU the batches live on the device, each part is timed between device synchronizations, --pin-memory pins
// the offloaded host buffers, and model TFLOP/s (Megatron's count, bench_util.h) are printed per configuration.
#include <ATen/ATen.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "gpt.h"

namespace {

namespace dc = deepspeed::comm;
using Clock = std::chrono::steady_clock;
using deepspeed::bench::max_over_ranks;
using deepspeed::bench::seconds_since;

struct Args {
  int64_t steps = 12;
  int64_t block = 2;
  int64_t warmup = 2;
  int64_t seed = 1234;
  int64_t micro = 8;
  int64_t sub_group = 4000000;
  std::string dir = "/tmp";
  bool bf16 = false;
  bool no_nvme = false;
  bool pin_memory = false;
  std::string kinds;
  int stage = 2;
  deepspeed::models::GPTConfig model = deepspeed::bench::reference_gpt();
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double load = 0.0;
  in >> load;
  return load;
}

// `offload` is "" (none), "cpu", "cpu+overlap", "cpu+zenflow", "cpu+super" (stage 3) or "nvme".
std::string config_json(const Args& args, const std::string& offload, const std::string& nvme_dir) {
  std::string off;
  const std::string pin = args.pin_memory ? R"(, "pin_memory": true)" : "";
  if (offload == "cpu") off = R"(, "offload_optimizer": {"device": "cpu")" + pin + "}";
  if (offload == "cpu+overlap")
    off = R"(, "offload_optimizer": {"device": "cpu", "overlap_step": true)" + pin + "}";
  // ZenFlow with DeepSpeed's typical selection: top 10% reselected every 50 iterations, a CPU step every iteration,
  // overlapped (examples/configs/gpt_zero2_zenflow.json selects 30% every 10).
  if (offload == "cpu+zenflow")
    off = R"(, "offload_optimizer": {"device": "cpu")" + pin + R"(}, "zenflow": {"topk_ratio": 0.1, "select_strategy": "step",
              "select_interval": 50, "update_interval": 1, "overlap_step": true})";
  if (offload == "cpu+super")
    off = R"(, "offload_optimizer": {"device": "cpu", "super_offload": true)" + pin + "}";
  if (offload == "nvme")
    off =
        R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + nvme_dir +
        R"(", "pipeline_read": true, "pipeline_write": true, "buffer_count": 9}, "sub_group_size": )" +
        std::to_string(args.sub_group);
  char buf[2048];
  std::snprintf(buf, sizeof(buf), R"({
    "train_micro_batch_size_per_gpu": %lld,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0,
    "steps_per_print": 1000000000,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                                              "weight_decay": 0.01}},
    "bf16": {"enabled": %s},
    "zero_optimization": {"stage": %d, "overlap_comm": true%s}
  })",
                static_cast<long long>(args.micro), args.bf16 ? "true" : "false", args.stage, off.c_str());
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Step time: offload_optimizer nvme vs cpu vs none, interleaved in one process"};
  app.add_option("--steps", args.steps, "timed steps per configuration")
      ->check(CLI::PositiveNumber);
  app.add_option("--block", args.block, "steps per configuration per block")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", args.warmup, "untimed steps per configuration");
  app.add_option("--micro", args.micro, "micro-batch per rank")->check(CLI::PositiveNumber);
  app.add_option("--sub-group", args.sub_group, "zero_optimization.sub_group_size (elements)")
      ->check(CLI::PositiveNumber);
  app.add_option("--dir", args.dir, "where the nvme configuration's swap directory is made");
  app.add_flag("--bf16", args.bf16, "bf16 model (fp32 masters) instead of fp32");
  app.add_option("--stage", args.stage, "ZeRO stage (1-3)")->check(CLI::Range(1, 3));
  app.add_flag("--no-nvme", args.no_nvme, "leave out the nvme configuration");
  // Another model than the reference GPT: e.g. a large vocabulary and short sequences make the optimizer step a
  // large share of the step.
  app.add_option("--vocab", args.model.vocab_size, "vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--seq-len", args.model.seq_len, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--layers", args.model.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--hidden", args.model.hidden, "hidden size")->check(CLI::PositiveNumber);
  app.add_option("--heads", args.model.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--kinds", args.kinds,
                 "configurations to run, comma separated, from none,cpu,cpu+overlap,cpu+zenflow,cpu+super,nvme "
                 "(default: all that apply; none and cpu are always run)");
  app.add_flag("--pin-memory", args.pin_memory, "offload_optimizer.pin_memory: pinned host buffers");
  int local_rank = 0;
  app.add_option("--local_rank", local_rank, "set by the launcher; unused");
  CLI11_PARSE(app, argc, argv);
  std::string nvme_dir;
  try {
    dc::init_distributed();
    const int rank = dc::get_rank();
    std::string tmpl = args.dir + "/ds_bench_offload.XXXXXX";
    if (rank == 0 && ::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("cannot make a directory under --dir " + args.dir);
    // Every rank uses rank 0's directory (the swapper adds rank<r>/ under it).
    std::vector<char> name(tmpl.begin(), tmpl.end());
    at::Tensor bytes = at::from_blob(name.data(), {static_cast<int64_t>(name.size())}, at::kChar);
    if (dc::get_world_size() > 1) dc::get_world_group().broadcast(bytes, 0);
    nvme_dir.assign(name.begin(), name.end());

    const auto& cfg = args.model;
    auto& accel = deepspeed::accelerator::get_accelerator();
    const c10::Device device = accel.device();
    at::manual_seed(static_cast<uint64_t>(args.seed) * 1000 + static_cast<uint64_t>(rank));
    std::vector<at::Tensor> xs, ys;
    for (int i = 0; i < 4; ++i) {
      at::Tensor tokens = at::randint(cfg.vocab_size, {args.micro, cfg.seq_len + 1}, at::kLong).to(device);
      xs.push_back(tokens.narrow(1, 0, cfg.seq_len).contiguous());
      ys.push_back(tokens.narrow(1, 1, cfg.seq_len).contiguous());
    }
    std::vector<std::string> kinds = {"", "cpu", "cpu+overlap", "cpu+zenflow"};
    if (args.stage == 3) kinds.push_back("cpu+super");
    if (!args.no_nvme) kinds.push_back("nvme");
    if (!args.kinds.empty()) {
      const std::vector<std::string> known = kinds;
      kinds = {"", "cpu"};
      std::stringstream list(args.kinds);
      for (std::string k; std::getline(list, k, ',');) {
        if (k == "none" || k == "cpu") continue;
        if (std::find(known.begin(), known.end(), k) == known.end())
          throw std::runtime_error("--kinds: unknown or inapplicable configuration '" + k +
                                   "' (cpu+super needs --stage 3, nvme is left out by --no-nvme)");
        kinds.push_back(k);
      }
    }
    auto index_of = [&](const std::string& k) {
      return static_cast<size_t>(std::find(kinds.begin(), kinds.end(), k) - kinds.begin());
    };
    std::vector<deepspeed::Engine> engines;
    for (const auto& k : kinds) {
      at::manual_seed(static_cast<uint64_t>(args.seed));
      deepspeed::models::GPT model(cfg);
      engines.push_back(deepspeed::initialize(
          model, deepspeed::Config::from_string(config_json(args, k, nvme_dir))));
    }
    const size_t n = kinds.size();
    std::vector<std::vector<double>> total(n), step_part(n);
    std::vector<double> last_loss(n, 0.0);
    std::vector<int64_t> done(n, 0);
    auto run_step = [&](size_t c, bool timed) {
      const int64_t i = done[c]++ % static_cast<int64_t>(xs.size());
      accel.synchronize();
      dc::barrier();
      const auto t0 = Clock::now();
      at::Tensor loss = engines[c].forward(xs[i], ys[i]);
      engines[c].backward(loss);
      accel.synchronize();
      const auto t1 = Clock::now();
      engines[c].step();
      accel.synchronize();
      const double s = seconds_since(t1);
      last_loss[c] = loss.item<double>();
      if (!timed) return;
      total[c].push_back(seconds_since(t0));
      step_part[c].push_back(s);
    };
    for (size_t c = 0; c < n; ++c)
      for (int64_t w = 0; w < args.warmup; ++w) run_step(c, false);
    for (int64_t k = 0; k < args.steps; k += args.block)
      for (size_t c = 0; c < n; ++c)
        for (int64_t j = 0; j < std::min(args.block, args.steps - k); ++j) run_step(c, true);
    for (size_t c = 0; c < n; ++c) {
      max_over_ranks(total[c]);
      max_over_ranks(step_part[c]);
    }
    if (rank == 0) {
      std::printf(
          "bench_offload_step: GPT (%lld layers, hidden %lld, vocab %lld, seq %lld), ZeRO stage %d, %s, micro "
          "%lld, %d rank(s), %lld steps each in blocks of %lld, load average %.2f\n",
          static_cast<long long>(cfg.layers), static_cast<long long>(cfg.hidden),
          static_cast<long long>(cfg.vocab_size), static_cast<long long>(cfg.seq_len), args.stage,
          args.bf16 ? "bf16" : "fp32", static_cast<long long>(args.micro), dc::get_world_size(),
          static_cast<long long>(args.steps), static_cast<long long>(args.block),
          load_average_1min());
      // Model FLOPs of one rank's step; TFLOP/s per rank.
      const double flops = deepspeed::bench::gpt_model_flops_per_step(cfg, args.micro);
      std::printf("  device %s, %.1f GFLOP per rank per step\n", device.str().c_str(), flops / 1e9);
      std::printf("  %-22s %10s %10s %14s %10s %10s\n", "offload_optimizer", "median s", "best s",
                  "step() med s", "TFLOP/s", "last loss");
      std::vector<double> med(n);
      for (size_t c = 0; c < n; ++c) {
        med[c] = median(total[c]);
        std::printf("  %-22s %10.4f %10.4f %14.4f %10.2f %10.4f\n",
                    kinds[c].empty() ? "none" : kinds[c].c_str(), med[c],
                    *std::min_element(total[c].begin(), total[c].end()), median(step_part[c]),
                    flops / med[c] / 1e12, last_loss[c]);
      }
      const double cpu_step = median(step_part[1]);
      std::printf("  cpu offload: cpu/none %.3f; the step() part is %.0f%% of the step\n", med[1] / med[0],
                  100.0 * cpu_step / med[1]);
      for (const std::string k : {"cpu+overlap", "cpu+zenflow", "cpu+super"}) {
        const size_t c = index_of(k);
        if (c == n) continue;
        std::printf("  %s: %s/cpu %.3f, %s/none %.3f, hides %.0f%% of the cpu step() part\n", k.c_str(), k.c_str(),
                    med[c] / med[1], k.c_str(), med[c] / med[0], 100.0 * (med[1] - med[c]) / cpu_step);
      }
      if (const size_t c = index_of("nvme"); c < n)
        std::printf("  nvme: nvme/cpu %.3f, nvme/none %.3f; step() part nvme/cpu %.3f\n", med[c] / med[1],
                    med[c] / med[0], median(step_part[c]) / cpu_step);
    }
    engines.clear();
    dc::barrier();
    if (rank == 0) std::filesystem::remove_all(nvme_dir);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_offload_step: %s\n", e.what());
    if (!nvme_dir.empty()) std::filesystem::remove_all(nvme_dir);
    return 1;
  }
}
