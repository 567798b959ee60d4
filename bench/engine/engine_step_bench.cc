// Step time of the deepspeed-cpp Engine at ZeRO stage 0 against a hand-written LibTorch
// data-parallel loop on an identical model, batch and world, in the same processes, so the ratio is
// read off one run:
//
//   build/bin/deepspeed --num_procs 2 build/bin/bench_engine_step [--steps 20 --block 5 --warmup 2]
//
// (a) ours: deepspeed::initialize with a config built here (micro 8, gas 1, fp32 Adam,
//     overlap_comm, buckets of --bucket elements), then engine.forward / backward / step.
// (b) the baseline, "what a user would write": forward, backward, every gradient flattened into
//     one buffer with at::cat, ONE all_reduce (sum) of it over deepspeed::comm's world group,
//     divided by the world size and copied back, then torch::optim::Adam::step() and zero_grad().
// Both run with the same at::get_num_threads() (the engine sets it from the cores per rank in
// initialize()). The two are measured in alternating blocks (A B A B ...) so the drift of this
// shared machine hits both alike; a step's time is the slowest rank's. Defaults are the reference
// model of the "Engine" issue: GPT vocab 4096, hidden 384, 6 layers, 6 heads, seq 128, untied head
// (13.8M parameters), micro-batch 8 per rank. Rank 0 prints the table; the last losses of both
// sides are printed too, as a check that they trained the same model on the same data.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/optim/adam.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "gpt.h"
#include "bench_util.h"

namespace {

namespace dc = deepspeed::comm;
using Clock = std::chrono::steady_clock;
using deepspeed::bench::max_over_ranks;
using deepspeed::bench::seconds_since;

struct Args {
  int64_t steps = 20;  // timed steps per side
  int64_t block = 5;   // steps per alternating block
  int64_t warmup = 2;  // untimed steps per side before the first block
  int64_t seed = 1234;
  int64_t micro = 8;         // micro-batch per rank
  int64_t bucket = 2000000;  // reduce_bucket_size (elements)
  double lr = 1e-3;
  deepspeed::models::GPTConfig model = deepspeed::bench::reference_gpt();
  bool untied_head = true;

};

// Per-step phase times (seconds) of one side; phases a side does not have stay 0.
struct StepTimes {
  std::vector<double> total, fwd, bwd, comm, step;
  void add(double t, double f, double b, double c, double s) {
    total.push_back(t);
    fwd.push_back(f);
    bwd.push_back(b);
    comm.push_back(c);
    step.push_back(s);
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}


std::string engine_config_json(const Args& args) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf), R"({
    "train_micro_batch_size_per_gpu": %lld,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0,
    "steps_per_print": 1000000000,
    "optimizer": {"type": "Adam", "params": {"lr": %g, "betas": [0.9, 0.999], "eps": 1e-8,
                                             "weight_decay": 0.0}},
    "zero_optimization": {"stage": 0, "overlap_comm": true, "reduce_bucket_size": %lld}
  })",
                static_cast<long long>(args.micro), args.lr, static_cast<long long>(args.bucket));
  return buf;
}

// The hand-written data-parallel loop: what a LibTorch user would write without DeepSpeed.
class BaselineLoop {
 public:
  BaselineLoop(deepspeed::models::GPT model, double lr)
      : model_(std::move(model)),
        params_(model_->parameters()),
        opt_(params_,
             torch::optim::AdamOptions(lr).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.0)) {
    // Same starting point as the engine (which broadcasts rank 0's parameters).
    auto world = dc::get_world_group();
    at::NoGradGuard no_grad;
    if (world.size() > 1)
      for (auto& p : params_) world.broadcast(p, /*src=*/0);
  }

  // One step; returns the loss and adds the phase times.
  double run(const at::Tensor& x, const at::Tensor& y, StepTimes* times) {
    auto world = dc::get_world_group();
    auto t0 = Clock::now();
    at::Tensor loss = model_->forward(x, y);
    double f = seconds_since(t0);
    auto t1 = Clock::now();
    loss.backward();
    double b = seconds_since(t1);
    auto t2 = Clock::now();
    if (world.size() > 1) {
      std::vector<at::Tensor> grads;
      grads.reserve(params_.size());
      for (auto& p : params_) grads.push_back(p.grad().view(-1));
      at::Tensor flat = at::cat(grads);
      world.all_reduce(flat, dc::ReduceOp::kSum);
      flat.div_(static_cast<double>(world.size()));
      int64_t offset = 0;
      for (auto& p : params_) {
        p.grad().copy_(flat.narrow(0, offset, p.numel()).view_as(p));
        offset += p.numel();
      }
    }
    double c = seconds_since(t2);
    auto t3 = Clock::now();
    opt_.step();
    opt_.zero_grad();
    double s = seconds_since(t3);
    double value = loss.item<double>();
    if (times) times->add(seconds_since(t0), f, b, c, s);
    return value;
  }

 private:
  deepspeed::models::GPT model_;
  std::vector<at::Tensor> params_;
  torch::optim::Adam opt_;
};

// One engine step, timed around the engine's own calls.
double run_engine(deepspeed::Engine& engine, const at::Tensor& x, const at::Tensor& y,
                  StepTimes* times) {
  auto t0 = Clock::now();
  at::Tensor loss = engine.forward(x, y);
  double f = seconds_since(t0);
  auto t1 = Clock::now();
  engine.backward(loss);  // includes waiting for the last gradient buckets' all-reduce
  double b = seconds_since(t1);
  auto t2 = Clock::now();
  engine.step();
  double s = seconds_since(t2);
  double value = loss.item<double>();
  if (times) times->add(seconds_since(t0), f, b, 0.0, s);
  return value;
}

void print_row(const char* name, const StepTimes& t, double tokens_per_step) {
  double med = median(t.total);
  std::printf("%-26s %10.4f %10.4f %10.4f %10.4f %12.0f | %8.4f %8.4f ", name, med, mean(t.total),
              *std::min_element(t.total.begin(), t.total.end()),
              *std::max_element(t.total.begin(), t.total.end()), tokens_per_step / med,
              median(t.fwd), median(t.bwd));
  // The engine's all-reduce runs inside its backward: no separate phase to show.
  const bool has_comm = std::any_of(t.comm.begin(), t.comm.end(), [](double c) { return c > 0; });
  if (has_comm) {
    std::printf("%8.4f", median(t.comm));
  } else {
    std::printf("%8s", "-");
  }
  std::printf(" %8.4f\n", median(t.step));
}

int run(const Args& args) {
  dc::init_distributed();
  const int rank = dc::get_rank();
  const int world = dc::get_world_size();

  deepspeed::models::GPTConfig cfg = args.model;
  cfg.tied_head = !args.untied_head;
  at::manual_seed(static_cast<uint64_t>(args.seed));
  deepspeed::models::GPT engine_model(cfg);
  at::manual_seed(static_cast<uint64_t>(args.seed));
  deepspeed::models::GPT baseline_model(cfg);

  auto config = deepspeed::Config::from_string(engine_config_json(args));
  auto engine = deepspeed::initialize(engine_model, config);
  // The engine chose the intra-op threads per rank; the baseline runs in the same process with the
  // same count.
  const int threads = at::get_num_threads();
  BaselineLoop baseline(baseline_model, args.lr);
  at::set_num_threads(threads);

  // Random token batches, different per rank, the same for both sides at the same step index.
  at::manual_seed(static_cast<uint64_t>(args.seed) * 1000 + static_cast<uint64_t>(rank));
  const int64_t num_batches = 8;
  std::vector<at::Tensor> xs, ys;
  for (int64_t i = 0; i < num_batches; ++i) {
    at::Tensor tokens = at::randint(cfg.vocab_size, {args.micro, cfg.seq_len + 1}, at::kLong);
    xs.push_back(tokens.narrow(1, 0, cfg.seq_len).contiguous());
    ys.push_back(tokens.narrow(1, 1, cfg.seq_len).contiguous());
  }

  const int64_t n_params = cfg.num_parameters();
  int64_t engine_params = 0;
  for (const auto& p : engine.parameters()) engine_params += p.numel();
  if (rank == 0) {
    std::printf(
        "bench_engine_step: GPT vocab %lld hidden %lld layers %lld heads %lld seq %lld %s head: "
        "%lld parameters "
        "(num_parameters() %lld, %.2fM)\n",
        static_cast<long long>(cfg.vocab_size), static_cast<long long>(cfg.hidden),
        static_cast<long long>(cfg.layers), static_cast<long long>(cfg.heads),
        static_cast<long long>(cfg.seq_len), cfg.tied_head ? "tied" : "untied",
        static_cast<long long>(engine_params), static_cast<long long>(n_params), n_params / 1e6);
    std::printf(
        "%d ranks, micro-batch %lld per rank, gas 1, fp32 Adam, %d intra-op thread(s) per rank, "
        "reduce_bucket_size %lld (%zu params), %lld timed steps per side in blocks of %lld after "
        "%lld "
        "warm-up\n",
        world, static_cast<long long>(args.micro), threads, static_cast<long long>(args.bucket),
        engine.parameters().size(), static_cast<long long>(args.steps),
        static_cast<long long>(args.block), static_cast<long long>(args.warmup));
    std::fflush(stdout);
  }

  int64_t engine_step = 0, baseline_step = 0;
  double engine_loss = 0.0, baseline_loss = 0.0;
  for (int64_t i = 0; i < args.warmup; ++i) {
    engine_loss =
        run_engine(engine, xs[engine_step % num_batches], ys[engine_step % num_batches], nullptr);
    ++engine_step;
    baseline_loss =
        baseline.run(xs[baseline_step % num_batches], ys[baseline_step % num_batches], nullptr);
    ++baseline_step;
  }

  StepTimes ours, theirs;
  int64_t done = 0;
  while (done < args.steps) {
    int64_t n = std::min(args.block, args.steps - done);
    dc::barrier();
    for (int64_t i = 0; i < n; ++i, ++engine_step)
      engine_loss =
          run_engine(engine, xs[engine_step % num_batches], ys[engine_step % num_batches], &ours);
    dc::barrier();
    for (int64_t i = 0; i < n; ++i, ++baseline_step)
      baseline_loss =
          baseline.run(xs[baseline_step % num_batches], ys[baseline_step % num_batches], &theirs);
    done += n;
  }

  for (auto* t : {&ours, &theirs})
    for (auto* v : {&t->total, &t->fwd, &t->bwd, &t->comm, &t->step}) max_over_ranks(*v);
  if (rank == 0) {
    const double tokens = static_cast<double>(world * args.micro * cfg.seq_len);
    std::printf("\n%-26s %10s %10s %10s %10s %12s | %8s %8s %8s %8s\n", "step time (s)", "median",
                "mean", "min", "max", "tokens/s", "fwd", "bwd", "allred", "step");
    print_row("deepspeed-cpp Engine (a)", ours, tokens);
    print_row("hand-written LibTorch (b)", theirs, tokens);
    std::printf(
        "(fwd/bwd/allred/step: medians over steps of the slowest rank; the engine's bwd includes "
        "its "
        "overlapped bucket all-reduce and the wait for it)\n");
    std::printf("ratio baseline/ours: median %.3f, mean %.3f (> 1: the engine is faster)\n",
                median(theirs.total) / median(ours.total), mean(theirs.total) / mean(ours.total));
    std::printf(
        "reference points (same model, 2 ranks, micro 8, fp32 Adam, this machine kind): PyTorch "
        "DDP ~1.41 "
        "s/step, DeepSpeed Python engine stage 0 ~1.53 s/step; ours/DDP = %.3f, ours/DeepSpeed = "
        "%.3f "
        "(< 1: ours is faster)\n",
        median(ours.total) / 1.41, median(ours.total) / 1.53);
    std::printf(
        "last loss (rank 0): engine %.6f, baseline %.6f (same data and init: should agree "
        "closely)\n",
        engine_loss, baseline_loss);
    std::fflush(stdout);
  }
  dc::barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Engine stage-0 step time vs a hand-written LibTorch data-parallel loop"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--steps", args.steps, "timed steps per side")->check(CLI::PositiveNumber);
  app.add_option("--block", args.block, "steps per alternating block")->check(CLI::PositiveNumber);
  app.add_option("--warmup", args.warmup, "untimed steps per side first")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", args.seed, "model and data seed");
  app.add_option("--bucket", args.bucket, "reduce_bucket_size in elements")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", args.lr, "Adam learning rate");
  app.add_option("--vocab", args.model.vocab_size, "vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--hidden", args.model.hidden, "hidden size")->check(CLI::PositiveNumber);
  app.add_option("--layers", args.model.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", args.model.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--seq-len,--seq_len", args.model.seq_len, "tokens per sequence")
      ->check(CLI::PositiveNumber);
  app.add_option("--micro", args.micro, "micro-batch per rank")->check(CLI::PositiveNumber);
  app.add_flag("--untied_head,!--tied_head", args.untied_head,
               "LM head with its own weight (default) or tied");
  int local_rank = 0;  // passed by the launcher; LOCAL_RANK in the environment is what is used
  app.add_option("--local_rank", local_rank, "set by the launcher");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine_step: %s\n", e.what());
    return 1;
  }
}
