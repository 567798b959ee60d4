// Per-rank peak resident memory and step time of ZeRO stages 0-3 in fp32 and bf16 (stage 3 also
// with prefetch off), beside the memory estimator, for the reference GPT at 2 ranks, and the bytes
// each rank sends per step at stages 2 and 3 (comms logger) vs the ZeRO paper's 2Ψ / 3Ψ. One run of
//
//   bench/zero/run_zero_stages.sh [build/bin] [--steps N --warmup W ...]
//
// prints one side-by-side table. The script runs this driver through the launcher once per
// configuration for memory (`--only 2,bf16 --rows rows.tsv`: rank 0 appends one row), once with
// `--interleave` for time (all ten engines in one process, timed in alternating blocks, so the
// drift of this shared machine hits all alike), then `bench_zero_stages --report rows.tsv` prints
// the table (zero_stages_report.h).
//
// Why a fresh process per configuration for memory: RSS peaks are per process and the allocator
// keeps freed memory, so a configuration measured after another could reuse its cached pages and
// look smaller than it is. In a fresh process every configuration pays the same one-time costs
// (LibTorch and BLAS buffers, Gloo, autograd threads) and nothing else. Per rank:
//   1. RSS, in-use heap and live tensor bytes before the model is built (after comm init and the
//      token batches): the baselines;
//   2. build the model and the engine (micro 8, gas 1, AdamW, overlap_comm, reduce_bucket_size
//      --bucket), run --warmup steps, then reset the peaks: the kernel's peak RSS (VmHWM via
//      clear_refs; checked to have worked, else the maximum of RSS sampled after every phase is
//      used) and the tensor counter's;
//   3. --steps timed steps (a step's time is the slowest rank's), sampling RSS and the in-use heap
//      after forward, backward and step;
//   4. each peak - its baseline is the configuration's footprint in that measure; beside them the
//      engine's model_state_bytes().total() and the estimator's figure.
// Three measures because RSS alone is not stable here: glibc gives the Gloo and autograd threads
// arenas of their own, and how many free pages they keep moves one configuration's peak RSS by
// ~80 MiB run to run. The in-use heap (mallinfo2: uordblks + hblkhd over all arenas) counts only
// blocks the program holds, so the stage 2 verdict rests on it; the tensor counter (every LibTorch
// CPU allocation) sees the transient peaks inside backward that sampling can miss.
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
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "counting_allocator.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/zero.h"
#include "deepspeed/zero/memory_estimator.h"
#include "gpt.h"
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
  bool interleave = false;  // time all ten configurations in one process, alternating blocks
  int64_t block = 2;        // steps per configuration per block with --interleave
  int64_t steps = 10;
  int64_t warmup = 2;
  int64_t seed = 1234;
  int64_t micro = 8;
  int64_t bucket = 2000000;  // reduce_bucket_size (elements)
  // allgather_bucket_size: chunked, since Gloo has no flat all-gather and a one-shot gather of the
  // whole partition costs world x partition of temporaries (fp32 stage 2: +26 MiB peak RSS here).
  int64_t allgather_bucket = 2000000;
  // Stage 3: small persistence threshold and no reuse window, so every block is released after use
  // and the partitioning's memory saving shows in resident memory.
  int64_t persistence = 1000;  // stage3_param_persistence_threshold (elements)
  // stage3_max_live_parameters: about three of the reference GPT's blocks (1.77M elements each), so
  // prefetch (two blocks ahead, stage3_prefetch_bucket_size 4e6) overlaps without gathering the
  // whole model.
  int64_t max_live = 6000000;
  int64_t comm_steps = 2;  // steps of the comms-logger window (after the timed steps)
  double lr = 1e-3;
  deepspeed::bench::ReportOptions report_options;
  deepspeed::models::GPTConfig model = deepspeed::bench::reference_gpt();
};

double rss_bytes() {
  return static_cast<double>(
      deepspeed::accelerator::get_accelerator().memory_stats().allocated_bytes);
}

// Bytes the program holds in malloc'ed blocks right now, over all of glibc's arenas: chunks in use
// (uordblks) plus blocks served by mmap (hblkhd). Unlike RSS it does not count the free pages an
// arena keeps cached, so how many arenas the Gloo and autograd threads happened to create does not
// move it.
double heap_in_use_bytes() {
  struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

// The LibTorch CPU allocator of the measuring process, counting live tensor bytes and their peak at
// every allocation (so, unlike sampling, it sees the transient peaks inside backward). Never
// destroyed: tensors it allocated may be freed after measure() returns (comm and autograd caches).
CountingAllocator& tensor_counter() {
  static CountingAllocator* counter = new CountingAllocator();
  return *counter;
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

// One configuration: stage 3 also runs with prefetch off (stage3_prefetch_bucket_size 0).
struct ConfigKey {
  int stage;
  std::string precision;
  bool prefetch;
};

std::string engine_config_json(const Args& args, int stage, const std::string& precision,
                               bool prefetch = true) {
  char stage3[256] = "";
  if (stage == 3)
    std::snprintf(stage3, sizeof(stage3),
                  R"(, "stage3_param_persistence_threshold": %lld,
                          "stage3_max_reuse_distance": 0,
                          "stage3_max_live_parameters": %lld%s)",
                  static_cast<long long>(args.persistence), static_cast<long long>(args.max_live),
                  prefetch ? R"(, "stage3_prefetch_bucket_size": 4000000)"
                           : R"(, "stage3_prefetch_bucket_size": 0)");
  char buf[1536];
  std::snprintf(buf, sizeof(buf), R"({
    "train_micro_batch_size_per_gpu": %lld,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0,
    "steps_per_print": 1000000000,
    "optimizer": {"type": "AdamW", "params": {"lr": %g, "betas": [0.9, 0.999], "eps": 1e-8,
                                              "weight_decay": 0.01}},
    "bf16": {"enabled": %s},
    "zero_optimization": {"stage": %d, "overlap_comm": true, "reduce_scatter": true,
                          "reduce_bucket_size": %lld, "allgather_bucket_size": %lld%s}
  })",
                static_cast<long long>(args.micro), args.lr, precision == "bf16" ? "true" : "false",
                stage, static_cast<long long>(args.bucket),
                static_cast<long long>(args.allgather_bucket), stage3);
  return buf;
}

// The engine of one configuration. Stage 3 builds the GPT with each block a unit inside a
// zero::Init scope (each block partitioned as soon as it is built, as DeepSpeed's zero.Init does).
deepspeed::Engine build_engine(const Args& args, const ConfigKey& key) {
  at::manual_seed(static_cast<uint64_t>(args.seed));
  auto config = deepspeed::Config::from_string(
      engine_config_json(args, key.stage, key.precision, key.prefetch));
  if (key.stage != 3) {
    deepspeed::models::GPT model(args.model);
    return deepspeed::initialize(model, config);
  }
  deepspeed::models::GPTConfig cfg = args.model;
  cfg.shard_blocks = true;
  std::optional<deepspeed::models::GPT> model;
  {
    dz::Init init(config);
    model.emplace(cfg);
  }
  return deepspeed::initialize(*model, config);
}

// Bytes this rank sends per step, from the comms logger over a short window of `steps` steps (the
// logger is on only here, so it does not perturb the timed steps). The logger reports every
// collective with the full (world-sized) buffer as its message size; what leaves one rank is, on
// average over the ranks, (n-1)/n of it (ring all-gather / reduce-scatter, or the n-1 peers'
// shares; a reduce's non-root ranks send their buffer, the root none), and 2(n-1)/n for an
// all-reduce. `zero_part` gets the all-gather + broadcast + reduce-scatter + reduce part: what the
// ZeRO paper's 2Ψ / 3Ψ count (parameter gathers and gradient reduction to the owners); `ops` a
// per-op summary.
double sent_bytes_per_step(deepspeed::Engine& engine, int64_t steps,
                           const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& ys,
                           int64_t* step, double* zero_part, std::string* ops) {
  dc::CommsLoggerOptions on;
  on.enabled = true;
  dc::barrier();
  dc::configure_comms_logger(on);
  dc::reset_comms_logger();
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t i = (*step)++ % static_cast<int64_t>(xs.size());
    at::Tensor loss = engine.forward(xs[i], ys[i]);
    engine.backward(loss);
    engine.step();
  }
  std::vector<dc::CommsStat> stats = dc::comms_stats();
  dc::configure_comms_logger(dc::CommsLoggerOptions{});
  dc::reset_comms_logger();
  const double n = dc::get_world_size();
  const double per_step = 1.0 / static_cast<double>(steps);
  std::map<std::string, std::pair<double, double>> by_op;  // op -> (sent bytes, calls) per step
  double total = 0.0, zero = 0.0;
  for (const auto& st : stats) {
    const bool all_reduce = st.op.rfind("all_reduce", 0) == 0;
    // Stage 3 gathers by one broadcast per owner (each rank roots one partition-sized message per
    // unit), which averages to msg * (n-1)/n sent per rank, as an all-gather's does.
    const bool partition = st.op.rfind("all_gather", 0) == 0 ||
                           st.op.rfind("reduce_scatter", 0) == 0 || st.op.rfind("reduce", 0) == 0 ||
                           st.op.rfind("broadcast", 0) == 0;
    const double sent = static_cast<double>(st.msg_bytes) * static_cast<double>(st.count) *
                        (all_reduce ? 2.0 : 1.0) * (n - 1) / n * per_step;
    total += sent;
    if (partition && !all_reduce) zero += sent;
    by_op[st.op].first += sent;
    by_op[st.op].second += static_cast<double>(st.count) * per_step;
  }
  ops->clear();
  for (const auto& [op, v] : by_op) {
    char item[128];
    std::snprintf(item, sizeof(item), "%s%s %.2f MiB in %.0f", ops->empty() ? "" : ", ", op.c_str(),
                  v.first / kMiB, v.second);
    *ops += item;
  }
  *zero_part = zero;
  return total;
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

const std::vector<ConfigKey> kConfigs = {
    {0, "fp32", true}, {1, "fp32", true}, {2, "fp32", true}, {3, "fp32", true}, {3, "fp32", false},
    {0, "bf16", true}, {1, "bf16", true}, {2, "bf16", true}, {3, "bf16", true}, {3, "bf16", false}};

// Step times of all ten configurations in ONE process, in alternating blocks of --block steps
// (config 1, 2, ..., 6, 1, 2, ...), so the drift of this shared machine hits all of them alike
// and the ratios are read off the same minutes. No memory figures: ten engines are alive at once.
std::vector<Row> measure_interleaved(const Args& args) {
  dc::init_distributed();
  const int rank = dc::get_rank();
  const int world = dc::get_world_size();
  std::vector<at::Tensor> xs, ys;
  make_batches(args, rank, &xs, &ys);
  std::vector<deepspeed::Engine> engines;
  for (const auto& c : kConfigs) engines.push_back(build_engine(args, c));
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
  // Stage 3 counters over the timed steps (gathers per step), before the comms window.
  std::vector<deepspeed::zero::Stage3Stats> s3(n);
  for (size_t c = 0; c < n; ++c)
    if (kConfigs[c].stage == 3) s3[c] = engines[c].stage3_stats();
  // Bytes sent per step, stages 2 and 3 only, after all timing.
  std::vector<double> sent(n, 0.0), agrs(n, 0.0);
  std::vector<std::string> ops(n);
  for (size_t c = 0; c < n; ++c)
    if (kConfigs[c].stage >= 2 && args.comm_steps > 0)
      sent[c] =
          sent_bytes_per_step(engines[c], args.comm_steps, xs, ys, &step[c], &agrs[c], &ops[c]);
  std::vector<Row> rows;
  for (size_t c = 0; c < n; ++c) {
    for (auto* v : {&total[c], &fwd[c], &bwd[c], &stp[c]}) max_over_ranks(*v);
    std::vector<double> bytes = {sent[c], agrs[c]};
    max_over_ranks(bytes);
    Row row;
    row.stage = kConfigs[c].stage;
    row.precision = kConfigs[c].precision;
    row.prefetch = kConfigs[c].prefetch ? 1 : 0;
    row.sent_mib = bytes[0] / kMiB;
    row.agrs_mib = bytes[1] / kMiB;
    row.psi_mib = static_cast<double>(args.model.num_parameters()) *
                  (row.precision == "bf16" ? 2.0 : 4.0) / kMiB;
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
      std::printf(
          "interleaved stage %d %s%s: median %.4f s, best %.4f s, last loss %.4f, sent %.1f "
          "MiB/step (all-gather + broadcast + reduce-scatter + reduce %.1f)",
          row.stage, row.precision.c_str(), row.prefetch ? "" : " no-prefetch", row.median_s,
          row.min_s, row.loss, row.sent_mib, row.agrs_mib);
    if (rank == 0 && row.stage == 3) {
      const double steps_run = static_cast<double>(args.warmup + args.steps);
      std::printf(
          ", %.1f gathers/step (%.1f prefetched), peak live %.2fM elems, pool peak %.1f MiB",
          s3[c].gathers / steps_run, s3[c].prefetches / steps_run, s3[c].peak_live_elems / 1e6,
          s3[c].pool_peak_bytes / kMiB);
    }
    if (rank == 0 && !ops[c].empty()) std::printf("; sent per step: %s", ops[c].c_str());
    if (rank == 0) std::printf("\n");
  }
  std::fflush(stdout);
  dc::barrier();
  return rows;
}

// Measures one configuration in this process (all ranks); returns the row (complete on rank 0).
Row measure(const Args& args, const ConfigKey& key) {
  const int stage = key.stage;
  const std::string& precision = key.precision;
  dc::init_distributed();
  const int rank = dc::get_rank();
  const int world = dc::get_world_size();
  const dz::Precision prec = parse_precision(precision);
  // Every tensor from here on is counted, so the baseline's live bytes are known as well.
  CountingAllocator::Scope counting(&tensor_counter());

  // Token batches first, so they are part of the baseline rather than of the configuration.
  const auto& cfg = args.model;
  std::vector<at::Tensor> xs, ys;
  make_batches(args, rank, &xs, &ys);
  const int64_t num_batches = static_cast<int64_t>(xs.size());
  dc::barrier();
  malloc_trim(0);
  const double baseline = rss_bytes();
  const double heap_baseline = heap_in_use_bytes();
  const double tensor_baseline = static_cast<double>(tensor_counter().live());

  Row row;
  row.stage = stage;
  row.precision = precision;
  row.prefetch = key.prefetch ? 1 : 0;
  row.world = world;
  row.tokens_per_step = static_cast<int64_t>(world) * args.micro * cfg.seq_len;
  std::vector<double> total, fwd, bwd, stp;
  double sampled_peak = 0.0, hwm_peak = 0.0, states = 0.0, heap_peak = 0.0, tensor_peak = 0.0;
  int64_t flat_elems = 0, largest_unit = 0;
  bool hwm_reset = false;
  {
    auto engine = build_engine(args, key);
    std::vector<int64_t> numels;
    for (const auto& p : engine.parameters()) numels.push_back(p.numel());
    flat_elems = dz::flat_numel(numels);
    // At stage 3 a released unit's parameters hold no elements between uses; Ψ is the model's.
    if (stage == 3) flat_elems = cfg.num_parameters();
    // Stage 3's gathered working set: the largest block, or the root unit (embeddings, head, final
    // norm: everything outside the blocks, gathered for the whole step) when larger.
    deepspeed::models::GPTConfig no_blocks = cfg;
    no_blocks.layers = 0;
    const int64_t root = no_blocks.num_parameters();
    const int64_t per_block = (cfg.num_parameters() - root) / std::max<int64_t>(cfg.layers, 1);
    largest_unit = std::max(root, per_block);

    auto& acc = deepspeed::accelerator::get_accelerator();
    // After forward (activations saved for backward), after backward (gradients in their buckets or
    // partitions) and after the step: where a step's memory peaks. The samples fall between the
    // phase timers (inside the step's total, which is not used when interleaved times exist).
    auto sample = [&]() {
      sampled_peak = std::max(sampled_peak, rss_bytes());
      heap_peak = std::max(heap_peak, heap_in_use_bytes());
    };
    auto run_step = [&](int64_t i, bool timed) {
      auto t0 = Clock::now();
      at::Tensor loss = engine.forward(xs[i % num_batches], ys[i % num_batches]);
      double f = seconds_since(t0);
      if (timed) sample();
      auto t1 = Clock::now();
      engine.backward(loss);
      double b = seconds_since(t1);
      if (timed) sample();
      auto t2 = Clock::now();
      engine.step();
      double s = seconds_since(t2);
      row.loss = loss.item<double>();
      if (timed) {
        sample();
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
    heap_peak = heap_in_use_bytes();
    tensor_counter().reset_peak();
    for (int64_t i = 0; i < args.steps; ++i) {
      dc::barrier();  // a step starts together on all ranks, so its time is not another rank's lag
      run_step(step++, true);
    }
    hwm_peak = static_cast<double>(acc.memory_stats().peak_allocated_bytes);
    tensor_peak = static_cast<double>(tensor_counter().peak());
    states = static_cast<double>(engine.model_state_bytes().total());
  }
  malloc_trim(0);

  for (auto* v : {&total, &fwd, &bwd, &stp}) max_over_ranks(*v);
  const double peak = hwm_reset ? std::max(hwm_peak, sampled_peak) : sampled_peak;
  std::vector<double> mem = {baseline,
                             peak - baseline,
                             states,
                             hwm_reset ? 0.0 : 1.0,
                             heap_peak - heap_baseline,
                             tensor_peak - tensor_baseline};
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
  row.heap_mib = mem[4] / kMiB;
  row.tensor_mib = mem[5] / kMiB;
  auto est = dz::estimate_model_states_mem_needs(
      flat_elems, world, stage, prec, dz::OffloadTarget::kNone, dz::OffloadTarget::kNone,
      stage == 3 ? largest_unit : 0, stage == 2 ? args.bucket : 0);
  row.estimate_mib = static_cast<double>(est.total()) / kMiB;
  row.load1 = load_average_1min();
  if (rank == 0) {
    std::printf(
        "stage %d %s%s: %lld parameters (flat %lld), %d ranks, %d intra-op thread(s) per rank, "
        "median %.4f s,"
        " peak RSS %.1f MiB over a %.1f MiB baseline, in-use heap %.1f, tensors %.1f, model states "
        "%.1f MiB, load %.2f\n",
        stage, precision.c_str(), key.prefetch ? "" : " no-prefetch",
        static_cast<long long>(cfg.num_parameters()), static_cast<long long>(flat_elems), world,
        at::get_num_threads(), row.median_s, row.peak_mib, row.baseline_mib, row.heap_mib,
        row.tensor_mib, row.states_mib, row.load1);
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
           "bench/zero/run_zero_stages.sh runs all ten configurations");
  // stage,precision[,noprefetch]
  std::vector<std::string> parts;
  std::stringstream only(args.only);
  for (std::string part; std::getline(only, part, ',');) parts.push_back(part);
  DS_CHECK(parts.size() == 2 || (parts.size() == 3 && parts[2] == "noprefetch"),
           "--only: expected stage,precision[,noprefetch] (e.g. 3,bf16,noprefetch), got '",
           args.only, "'");
  DS_CHECK(parts[0] == "0" || parts[0] == "1" || parts[0] == "2" || parts[0] == "3",
           "--only: stage must be 0, 1, 2 or 3, got '", parts[0], "'");
  DS_CHECK(parts.size() == 2 || parts[0] == "3",
           "--only: noprefetch applies to stage 3 only, got '", args.only, "'");
  parse_precision(parts[1]);
  Row row = measure(args, ConfigKey{std::stoi(parts[0]), parts[1], parts.size() == 2});
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
      "ZeRO stages 0/1/2/3 x fp32/bf16: per-rank peak resident memory and step time beside the "
      "estimator"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option(
      "--only", args.only,
      "configuration to measure: stage,precision[,noprefetch] (0|1|2|3, fp32|bf16; noprefetch: "
      "stage 3 with stage3_prefetch_bucket_size 0)");
  app.add_option("--rows", args.rows, "TSV file rank 0 appends the measured row to");
  app.add_option("--report", args.report,
                 "print the side-by-side table from this TSV file and exit");
  app.add_flag(
      "--interleave", args.interleave,
      "time all ten configurations in one process in alternating blocks (no memory figures)");
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
  app.add_option("--max_live", args.max_live,
                 "stage3_max_live_parameters of the stage 3 configurations");
  app.add_option("--persistence", args.persistence,
                 "stage3_param_persistence_threshold (elements) of the stage 3 configurations")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--comm_steps", args.comm_steps,
                 "steps of the comms-logger window after the timed steps (--interleave; 0: none)")
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
  args.report_options.allgather_bucket_elems = args.allgather_bucket;
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_zero_stages: %s\n", e.what());
    return 1;
  }
}
