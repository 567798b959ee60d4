// Pipeline bubble: the idle share of each stage in one training batch, measured by the PipelineEngine's own clocks
// (1 - compute / batch time), beside the 1F1B schedule's theory (p - 1) / (m + p - 1) for p stages and m
// micro-batches. Run as p ranks (one stage each):
//
//   deepspeed --num_procs 2 bench_pipeline_bubble            (p = 2; m = 1, 4, 8)
//   deepspeed --num_procs 4 bench_pipeline_bubble            (p = 4)
//
// Every stage holds the same layers (Linear + GELU blocks on [micro, hidden] activations), so stages cost the
// same, as the theory assumes. Measured idle also contains the point-to-point transfers and the reductions, which
// the theory leaves out; with more ranks than cores, stages also wait for a core, which shows as idle time too.
// The theory is an average over stages (the last stage waits only at the start, the first mostly at the end), so
// the mean over stages is the figure to compare.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/pipe/engine.h"

namespace {

namespace dsp = deepspeed::pipe;

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(int64_t h) : fc(register_module("fc", torch::nn::Linear(h, h))) {}
  at::Tensor forward(const at::Tensor& x) { return at::gelu(fc->forward(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Block);

struct Args {
  std::vector<int> micro_batches{1, 4, 8};
  int layers_per_stage = 2;
  int64_t hidden = 512;
  int64_t micro = 64;
  int batches = 6;  // measured, after one warm-up batch
};

// Mean idle fraction of this rank over `batches` train_batch calls at m micro-batches.
double measure(const Args& a, int m) {
  const int p = deepspeed::comm::get_world_size();
  dsp::PipelineModuleOptions o;
  for (int i = 0; i < a.layers_per_stage * p; ++i) o.layers.push_back(dsp::LayerSpec::of<Block>("Block", a.hidden));
  o.num_stages = p;
  o.partition_method = "uniform";
  o.base_seed = 1;
  o.loss_fn = [](const at::Tensor& out, const at::Tensor& labels) { return (out - labels).pow(2).mean(); };
  dsp::PipelineModule module(o);
  auto config = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": )" + std::to_string(a.micro) + R"(, "gradient_accumulation_steps": )" +
      std::to_string(m) +
      R"(, "steps_per_print": 1000, "gradient_clipping": 0, "optimizer": {"type": "SGD", "params": {"lr": 0.001}}})");
  auto engine = dsp::initialize(module, config);
  at::Tensor x = at::randn({a.micro, a.hidden}), y = at::randn({a.micro, a.hidden});
  auto data = [&] { return dsp::MicroBatch{x, y}; };
  engine.train_batch(data);  // warm-up: first exchanges, allocations
  double idle = 0;
  for (int b = 0; b < a.batches; ++b) {
    engine.train_batch(data);
    idle += engine.last_timing().idle_fraction();
  }
  return idle / a.batches;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"pipeline bubble: measured idle share per stage vs (p-1)/(m+p-1)"};
  app.add_option("--micro_batches", a.micro_batches, "micro-batches per step to measure");
  app.add_option("--layers_per_stage", a.layers_per_stage)->check(CLI::PositiveNumber);
  app.add_option("--hidden", a.hidden)->check(CLI::PositiveNumber);
  app.add_option("--micro", a.micro, "samples per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--batches", a.batches)->check(CLI::PositiveNumber);
  int local_rank = 0;
  app.add_option("--local_rank", local_rank, "set by the launcher");
  CLI11_PARSE(app, argc, argv);
  deepspeed::comm::init_distributed();
  const int p = deepspeed::comm::get_world_size();
  const int rank = deepspeed::comm::get_rank();
  if (rank == 0) std::printf("%-3s %-3s %-8s %-s\n", "p", "m", "theory", "measured idle: mean over stages (ratio to theory) | per stage");
  for (int m : a.micro_batches) {
    const double mine = measure(a, m);
    at::Tensor all = at::zeros({p}, at::kDouble);
    all[rank] = mine;
    deepspeed::comm::get_world_group().all_reduce(all, deepspeed::comm::ReduceOp::kSum);
    if (rank != 0) continue;
    const double theory = static_cast<double>(p - 1) / (m + p - 1);
    const double mean = all.mean().item<double>();
    std::printf("%-3d %-3d %-8.3f mean %.3f (%.2fx) |", p, m, theory, mean, mean / theory);
    for (int s = 0; s < p; ++s) {
      const double v = all[s].item<double>();
      std::printf(" s%d %.3f", s, v);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
