// Per-rank peak resident memory and step time of ZeRO stages 0, 1 and 2 in fp32 and bf16, beside
// the memory estimator's per-rank model-state figure, for the reference GPT at 2 ranks. One run of
//
//   bench/zero/run_zero_stages.sh [build/bin] [--steps N --warmup W ...]
//
// prints one side-by-side table. The script runs this driver through the launcher once per
// configuration for memory (`--only 2,bf16 --rows rows.tsv`: rank 0 appends one row), once with
// `--interleave` for time (all six engines in one process, timed in alternating blocks, so the
// drift of this shared machine hits all alike), then `bench_zero_stages --report rows.tsv` prints
// the table (zero_stages_report.h).
//
// Why a fresh process per configuration for memory: RSS peaks are per process and the allocator
// keeps freed memory, so a configuration measured after another could reuse its cached pages and
// look smaller than it is. In a fresh process every configuration pays the same one-time costs
// (LibTorch and BLAS buffers, Gloo, autograd threads) and nothing else. Per rank:
//   1. RSS before the model is built (after comm init and the token batches): the baseline;
//   2. build the model and the engine (micro 8, gas 1, AdamW, overlap_comm, reduce_bucket_size
//      --bucket), run --warmup steps, then reset the kernel's peak RSS (VmHWM via clear_refs;
//      checked to have worked, else the maximum of RSS sampled after every phase is used);
//   3. --steps timed steps (a step's time is the slowest rank's);
//   4. peak RSS - baseline is the configuration's footprint; beside it the engine's
//      model_state_bytes().total(), and footprint - model states: the activation / working-set
//      allowance the configuration needed.
// Memory figures are the maximum over ranks.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/zero/memory_estimator.h"
#include "gpt.h"
#include "bench_util.h"
#include "zero_stages_report.h"

namespace {

namespace dc = deepspeed::comm;
namespace dz = deepspeed::zero;
using Clock = std::chrono::steady_clock;
using deepspeed::bench::max_over_ranks;
using deepspeed::bench::seconds_since;

using deepspeed::bench::kMiB;
using deepspeed::bench::median;
using deepspeed::bench::merge_rounds;
using deepspeed::bench::Row;

struct Args {
  std::string only;         // "stage,precision", e.g. "2,bf16": measure that configuration
  std::string rows;         // TSV file rank 0 appends its row to
  std::string report;       // TSV file to print the table from (no distributed run)
  bool interleave = false;  // time all six configurations in one process, alternating blocks
  int64_t block = 2;        // steps per configuration per block with --interleave
  int64_t steps = 10;
  int64_t warmup = 2;
  int64_t seed = 1234;
  int64_t micro = 8;
  int64_t bucket = 2000000;  // reduce_bucket_size (elements)
  // allgather_bucket_size: chunked, since Gloo has no flat all-gather and a one-shot gather of the
  // whole partition costs world x partition of temporaries (fp32 stage 2: +26 MiB peak RSS here).
  int64_t allgather_bucket = 2000000;
  double lr = 1e-3;
  deepspeed::bench::ReportOptions report_options;
  deepspeed::models::GPTConfig model = deepspeed::bench::reference_gpt();

};


double rss_bytes() {
  return static_cast<double>(
      deepspeed::accelerator::get_accelerator().memory_stats().allocated_bytes);
}

double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double load = 0.0;
  in >> load;
  return load;
}

dz::Precision parse_precision(const std::string& name) {
  if (name == "fp32") return dz::Precision::kFp32;
  if (name == "bf16") return dz::Precision::kBf16;
  DS_CHECK(false, "--only: precision must be fp32 or bf16, got '", name, "'");
  return dz::Precision::kFp32;
}

std::string engine_config_json(const Args& args, int stage, const std::string& precision) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf), R"({
    "train_micro_batch_size_per_gpu": %lld,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1000000000,
    "optimizer": {"type": "AdamW", "params": {"lr": %g, "betas": [0.9, 0.999], "eps": 1e-8,
                                              "weight_decay": 0.01}},
    "bf16": {"enabled": %s},
    "zero_optimization": {"stage": %d, "overlap_comm": true, "reduce_scatter": true,
                          "reduce_bucket_size": %lld, "allgather_bucket_size": %lld}
  })",
                static_cast<long long>(args.micro), args.lr, precision == "bf16" ? "true" : "false",
                stage, static_cast<long long>(args.bucket),
                static_cast<long long>(args.allgather_bucket));
  return buf;
}

// Random token batches, different per rank, the same for every configuration.
void make_batches(const Args& args, int rank, std::vector<at::Tensor>* xs,
                  std::vector<at::Tensor>* ys) {
  const auto& cfg = args.model;
  at::manual_seed(static_cast<uint64_t>(args.seed) * 1000 + static_cast<uint64_t>(rank));
  for (int64_t i = 0; i < 4; ++i) {
    at::Tensor tokens = at::randint(cfg.vocab_size, {args.micro, cfg.seq_len + 1}, at::kLong);
    xs->push_back(tokens.narrow(1, 0, cfg.seq_len).contiguous());
    ys->push_back(tokens.narrow(1, 1, cfg.seq_len).contiguous());
  }
}

const std::vector<std::pair<int, std::string>> kConfigs = {{0, "fp32"}, {1, "fp32"}, {2, "fp32"},
                                                           {0, "bf16"}, {1, "bf16"}, {2, "bf16"}};

// Step times of all six configurations in ONE process, in alternating blocks of --block steps
// (config 1, 2, ..., 6, 1, 2, ...), so the drift of this shared machine hits all of them alike
// and the ratios are read off the same minutes. No memory figures: six engines are alive at once.
std::vector<Row> measure_interleaved(const Args& args) {
  dc::init_distributed();
  const int rank = dc::get_rank();
  const int world = dc::get_world_size();
  std::vector<at::Tensor> xs, ys;
  make_batches(args, rank, &xs, &ys);
  std::vector<deepspeed::Engine> engines;
  for (const auto& c : kConfigs) {
    at::manual_seed(static_cast<uint64_t>(args.seed));
    deepspeed::models::GPT model(args.model);
    engines.push_back(deepspeed::initialize(
        model, deepspeed::Config::from_string(engine_config_json(args, c.first, c.second))));
  }
  const size_t n = kConfigs.size();
  std::vector<std::vector<double>> total(n), fwd(n), bwd(n), stp(n);
  std::vector<double> last_loss(n, 0.0);
  std::vector<int64_t> step(n, 0);
  auto run_step = [&](size_t c, bool timed) {
    deepspeed::Engine& engine = engines[c];
    const int64_t i = step[c]++ % static_cast<int64_t>(xs.size());
    dc::barrier();
    auto t0 = Clock::now();
    at::Tensor loss = engine.forward(xs[i], ys[i]);
    double f = seconds_since(t0);
    auto t1 = Clock::now();
    engine.backward(loss);
    double b = seconds_since(t1);
    auto t2 = Clock::now();
    engine.step();
    double s = seconds_since(t2);
    last_loss[c] = loss.item<double>();
    if (!timed) return;
    total[c].push_back(seconds_since(t0));
    fwd[c].push_back(f);
    bwd[c].push_back(b);
    stp[c].push_back(s);
  };
  for (size_t c = 0; c < n; ++c)
    for (int64_t w = 0; w < args.warmup; ++w) run_step(c, false);
  for (int64_t done = 0; done < args.steps; done += args.block)
    for (size_t c = 0; c < n; ++c)
      for (int64_t k = 0; k < std::min(args.block, args.steps - done); ++k) run_step(c, true);
  std::vector<Row> rows;
  for (size_t c = 0; c < n; ++c) {
    for (auto* v : {&total[c], &fwd[c], &bwd[c], &stp[c]}) max_over_ranks(*v);
    Row row;
    row.stage = kConfigs[c].first;
    row.precision = kConfigs[c].second;
    row.world = world;
    row.tokens_per_step = static_cast<int64_t>(world) * args.micro * args.model.seq_len;
    row.median_s = median(total[c]);
    row.min_s = *std::min_element(total[c].begin(), total[c].end());
    row.fwd_s = median(fwd[c]);
    row.bwd_s = median(bwd[c]);
    row.step_s = median(stp[c]);
    row.loss = last_loss[c];
    row.load1 = load_average_1min();
    row.interleaved = 1;
    rows.push_back(row);
    if (rank == 0)
      std::printf("interleaved stage %d %s: median %.4f s, best %.4f s, last loss %.4f\n",
                  row.stage, row.precision.c_str(), row.median_s, row.min_s, row.loss);
  }
  std::fflush(stdout);
  dc::barrier();
  return rows;
}

// Measures one configuration in this process (all ranks); returns the row (complete on rank 0).
Row measure(const Args& args, int stage, const std::string& precision) {
  dc::init_distributed();
  const int rank = dc::get_rank();
  const int world = dc::get_world_size();
  const dz::Precision prec = parse_precision(precision);

  // Token batches first, so they are part of the baseline rather than of the configuration.
  const auto& cfg = args.model;
  std::vector<at::Tensor> xs, ys;
  make_batches(args, rank, &xs, &ys);
  const int64_t num_batches = static_cast<int64_t>(xs.size());
  dc::barrier();
  malloc_trim(0);
  const double baseline = rss_bytes();

  Row row;
  row.stage = stage;
  row.precision = precision;
  row.world = world;
  row.tokens_per_step = static_cast<int64_t>(world) * args.micro * cfg.seq_len;
  std::vector<double> total, fwd, bwd, stp;
  double sampled_peak = 0.0, hwm_peak = 0.0, states = 0.0;
  int64_t flat_elems = 0;
  bool hwm_reset = false;
  {
    at::manual_seed(static_cast<uint64_t>(args.seed));
    deepspeed::models::GPT model(cfg);
    auto engine = deepspeed::initialize(
        model, deepspeed::Config::from_string(engine_config_json(args, stage, precision)));
    std::vector<int64_t> numels;
    for (const auto& p : engine.parameters()) numels.push_back(p.numel());
    flat_elems = dz::flat_numel(numels);

    auto& acc = deepspeed::accelerator::get_accelerator();
    auto run_step = [&](int64_t i, bool timed) {
      auto t0 = Clock::now();
      at::Tensor loss = engine.forward(xs[i % num_batches], ys[i % num_batches]);
      double f = seconds_since(t0);
      if (timed) sampled_peak = std::max(sampled_peak, rss_bytes());
      auto t1 = Clock::now();
      engine.backward(loss);
      double b = seconds_since(t1);
      if (timed) sampled_peak = std::max(sampled_peak, rss_bytes());
      auto t2 = Clock::now();
      engine.step();
      double s = seconds_since(t2);
      row.loss = loss.item<double>();
      if (timed) {
        sampled_peak = std::max(sampled_peak, rss_bytes());
        total.push_back(seconds_since(t0));
        fwd.push_back(f);
        bwd.push_back(b);
        stp.push_back(s);
      }
    };
    int64_t step = 0;
    for (int64_t i = 0; i < args.warmup; ++i) run_step(step++, false);
    dc::barrier();
    acc.reset_peak_memory_stats();
    // Reset worked if the peak now reads (about) the current RSS rather than a warm-up high.
    auto after_reset = acc.memory_stats();
    hwm_reset = after_reset.peak_allocated_bytes <= after_reset.allocated_bytes + 1024 * 1024;
    sampled_peak = static_cast<double>(after_reset.allocated_bytes);
    for (int64_t i = 0; i < args.steps; ++i) {
      dc::barrier();  // a step starts together on all ranks, so its time is not another rank's lag
      run_step(step++, true);
    }
    hwm_peak = static_cast<double>(acc.memory_stats().peak_allocated_bytes);
    states = static_cast<double>(engine.model_state_bytes().total());
  }
  malloc_trim(0);

  for (auto* v : {&total, &fwd, &bwd, &stp}) max_over_ranks(*v);
  const double peak = hwm_reset ? std::max(hwm_peak, sampled_peak) : sampled_peak;
  std::vector<double> mem = {baseline, peak - baseline, states, hwm_reset ? 0.0 : 1.0};
  max_over_ranks(mem);
  row.median_s = median(total);
  row.min_s = *std::min_element(total.begin(), total.end());
  row.fwd_s = median(fwd);
  row.bwd_s = median(bwd);
  row.step_s = median(stp);
  row.baseline_mib = mem[0] / kMiB;
  row.peak_mib = mem[1] / kMiB;
  row.states_mib = mem[2] / kMiB;
  row.hwm_reset = mem[3] > 0.0 ? 0 : 1;
  auto est = dz::estimate_model_states_mem_needs(flat_elems, world, stage, prec,
                                                 dz::OffloadTarget::kNone, dz::OffloadTarget::kNone,
                                                 0, stage == 2 ? args.bucket : 0);
  row.estimate_mib = static_cast<double>(est.total()) / kMiB;
  row.load1 = load_average_1min();
  if (rank == 0) {
    std::printf(
        "stage %d %s: %lld parameters (flat %lld), %d ranks, %d intra-op thread(s) per rank, "
        "median %.4f s,"
        " peak RSS %.1f MiB over a %.1f MiB baseline, model states %.1f MiB, load %.2f\n",
        stage, precision.c_str(), static_cast<long long>(cfg.num_parameters()),
        static_cast<long long>(flat_elems), world, at::get_num_threads(), row.median_s,
        row.peak_mib, row.baseline_mib, row.states_mib, row.load1);
    std::fflush(stdout);
  }
  dc::barrier();
  return row;
}

int run(const Args& args) {
  if (!args.report.empty()) {
    deepspeed::bench::print_report(deepspeed::bench::read_rows(args.report), args.report_options);
    return 0;
  }
  if (args.interleave) {
    std::vector<Row> rows = measure_interleaved(args);
    if (dc::get_rank() == 0 && !args.rows.empty()) {
      std::ofstream out(args.rows, std::ios::app);
      DS_CHECK(static_cast<bool>(out), "--rows: cannot append to '", args.rows, "'");
      for (const auto& r : rows) out << r.to_tsv() << '\n';
    }
    if (dc::get_rank() == 0 && args.rows.empty())
      deepspeed::bench::print_report(merge_rounds(rows), args.report_options);
    return 0;
  }
  DS_CHECK(!args.only.empty(),
           "pass --only stage,precision (e.g. --only 2,bf16) or --report rows.tsv; "
           "bench/zero/run_zero_stages.sh runs all six configurations");
  const auto comma = args.only.find(',');
  DS_CHECK(comma != std::string::npos, "--only: expected stage,precision (e.g. 2,bf16), got '",
           args.only, "'");
  const std::string stage_text = args.only.substr(0, comma);
  DS_CHECK(stage_text == "0" || stage_text == "1" || stage_text == "2",
           "--only: stage must be 0, 1 or 2, got '", stage_text, "'");
  Row row = measure(args, std::stoi(stage_text), args.only.substr(comma + 1));
  if (dc::get_rank() == 0 && !args.rows.empty()) {
    std::ofstream out(args.rows, std::ios::app);
    DS_CHECK(static_cast<bool>(out), "--rows: cannot append to '", args.rows, "'");
    out << row.to_tsv() << '\n';
  }
  if (dc::get_rank() == 0 && args.rows.empty())
    deepspeed::bench::print_report(merge_rounds({row}), args.report_options);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{
      "ZeRO stages 0/1/2 x fp32/bf16: per-rank peak resident memory and step time beside the "
      "estimator"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--only", args.only,
                 "configuration to measure: stage,precision (0|1|2, fp32|bf16)");
  app.add_option("--rows", args.rows, "TSV file rank 0 appends the measured row to");
  app.add_option("--report", args.report,
                 "print the side-by-side table from this TSV file and exit");
  app.add_flag(
      "--interleave", args.interleave,
      "time all six configurations in one process in alternating blocks (no memory figures)");
  app.add_option("--block", args.block, "steps per configuration per block with --interleave")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", args.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", args.warmup, "untimed steps before the peak reset")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", args.seed, "model and data seed");
  app.add_option("--bucket", args.bucket, "reduce_bucket_size (elements)")
      ->check(CLI::PositiveNumber);
  app.add_option("--allgather_bucket", args.allgather_bucket, "allgather_bucket_size (elements)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", args.lr, "AdamW learning rate");
  // The allowance is what stage 2 may hold beyond its model states: activations saved for backward
  // at micro 8 x seq 128 (the [8,128,4096] logits and their softmax gradient alone are 32 MiB in
  // fp32), the OpenBLAS/LibTorch/Gloo buffers the first step touches, glibc's retained free pages
  // (together: stage 0's measured RSS - states, ~320 MiB fp32 / ~175 MiB bf16 here), plus stage 2's
  // own transients (autograd's per-parameter gradient before the hook moves it to staging, the
  // parameter all-gather chunks): about 25% over stage 0's working set.
  app.add_option("--allowance_fp32_mib", args.report_options.allowance_fp32_mib,
                 "stage 2's documented working-set allowance over model states, fp32 (MiB)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--allowance_bf16_mib", args.report_options.allowance_bf16_mib,
                 "stage 2's documented working-set allowance over model states, bf16 (MiB)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--vocab", args.model.vocab_size, "vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--hidden", args.model.hidden, "hidden size")->check(CLI::PositiveNumber);
  app.add_option("--layers", args.model.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", args.model.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--seq-len,--seq_len", args.model.seq_len, "tokens per sequence")
      ->check(CLI::PositiveNumber);
  app.add_option("--micro", args.micro, "micro-batch per rank")->check(CLI::PositiveNumber);
  bool untied = true;
  app.add_flag("--untied_head,!--tied_head", untied,
               "LM head with its own weight (default) or tied");
  int local_rank = 0;  // passed by the launcher; LOCAL_RANK in the environment is what is used
  app.add_option("--local_rank", local_rank, "set by the launcher");
  CLI11_PARSE(app, argc, argv);
  args.model.tied_head = !untied;
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_zero_stages: %s\n", e.what());
    return 1;
  }
}
