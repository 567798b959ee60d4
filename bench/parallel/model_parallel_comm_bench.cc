// Bytes communicated per training step by tensor parallelism and by Ulysses sequence parallelism, measured by the
// comms logger, against the papers' per-layer formulas. Run as W ranks through the launcher (not a test):
//
//   deepspeed --num_procs 2 bench_model_parallel_comm [--hidden 256 --seq 128 --micro 4]
//
// Both layouts split the reference GPT over all W ranks (no data parallelism, so no gradient reduction grows with
// the model). A step is run at two depths, L and 2L blocks, and the difference of the two steps' traffic divided by L
// is what one transformer block costs: the embedding, the head, the vocabulary-parallel loss and the gradient norm
// cancel out.
//   tensor parallel (Megatron): per block 2 all-reduces in forward (attention output, MLP output) and 2 in backward
//     (the input gradients of q/k/v and of the MLP's up projection), each of b * s * h elements: 4 b s h.
//   Ulysses: per block 4 all-to-alls in forward (q, k, v in, the output back) and 4 in backward, each of this rank's
//     b * (s / P) * h elements: 8 b s h / P (the paper counts the forward's 4).
// Printed: per-block elements measured, the formula's, their ratio (1.00 when every collective is the one the layout
// needs and none is repeated).
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/sequence/layer.h"
#include "deepspeed/tp/groups.h"
#include "gpt.h"

namespace {

struct Args {
  int64_t hidden = 256;
  int64_t heads = 8;
  int64_t seq = 128;
  int64_t micro = 4;
  int64_t layers = 2;  // L; the second run has 2L
};

const char* kConfig = R"({"train_micro_batch_size_per_gpu": %lld, "steps_per_print": 1000000, "gradient_clipping": 0,
  "optimizer": {"type": "SGD", "params": {"lr": 0.01}}, "comms_logger": {"enabled": true, "prof_all": true},
  %s})";

// Elements moved by `op` in one training step (bytes / 4: fp32) of a GPT of `layers` blocks split as `layout`.
double step_elements(const Args& a, const std::string& layout, int64_t layers, const std::string& op) {
  const int w = deepspeed::comm::get_world_size();
  deepspeed::models::GPTConfig cfg;
  cfg.vocab_size = 256 * w;
  cfg.seq_len = a.seq;
  cfg.layers = layers;
  cfg.hidden = a.hidden;
  cfg.heads = a.heads;
  cfg.init_seed = 1;
  char json[512];
  if (layout == "tp") {
    cfg.tensor_parallel = deepspeed::tp::tensor_parallel_groups(w).tensor_parallel;
    std::snprintf(json, sizeof(json), kConfig, static_cast<long long>(a.micro),
                  ("\"tensor_parallel\": {\"autotp_size\": " + std::to_string(w) + "}").c_str());
  } else {
    cfg.sequence_parallel = deepspeed::sequence::sequence_parallel_groups(w).sequence_parallel;
    std::snprintf(json, sizeof(json), kConfig, static_cast<long long>(a.micro),
                  ("\"sequence_parallel_size\": " + std::to_string(w)).c_str());
  }
  deepspeed::models::GPT model(cfg);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
  const int64_t tokens = layout == "sp" ? a.seq / w : a.seq;
  at::manual_seed(7);
  const at::Tensor x = at::randint(cfg.vocab_size, {a.micro, tokens}, at::kLong);
  const at::Tensor y = at::randint(cfg.vocab_size, {a.micro, tokens}, at::kLong);
  auto step = [&] {
    at::Tensor loss = engine.forward(x, y);
    engine.backward(loss);
    engine.step();
  };
  step();  // warm-up: anything done once per run is not a step's
  deepspeed::comm::reset_comms_logger();
  step();
  double bytes = 0;
  for (const auto& s : deepspeed::comm::comms_stats())
    if (s.op == op) bytes += static_cast<double>(s.msg_bytes) * static_cast<double>(s.count);
  return bytes / 4.0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Per-block communication of tensor and Ulysses sequence parallelism vs the formulas"};
  app.add_option("--hidden", a.hidden, "hidden size");
  app.add_option("--heads", a.heads, "attention heads (divisible by the world size)");
  app.add_option("--seq", a.seq, "sequence length (divisible by the world size)");
  app.add_option("--micro", a.micro, "micro-batch");
  app.add_option("--layers", a.layers, "blocks of the smaller model (the larger has twice as many)");
  int local_rank = 0;
  app.add_option("--local_rank", local_rank, "set by the launcher");
  CLI11_PARSE(app, argc, argv);
  try {
    deepspeed::comm::init_distributed();
    const int w = deepspeed::comm::get_world_size();
    const double bsh = static_cast<double>(a.micro * a.seq * a.hidden);
    struct Row {
      const char* layout;
      const char* op;
      double formula;  // elements per block per step
    } rows[] = {{"tp", "all_reduce", 4 * bsh}, {"sp", "all_to_all_single", 8 * bsh / w}};
    if (deepspeed::comm::get_rank() == 0)
      std::printf("%d ranks, micro %lld x seq %lld x hidden %lld, blocks %lld vs %lld\n"
                  "layout  collective         per-block elements  formula     ratio\n",
                  w, static_cast<long long>(a.micro), static_cast<long long>(a.seq),
                  static_cast<long long>(a.hidden), static_cast<long long>(a.layers),
                  static_cast<long long>(2 * a.layers));
    for (const Row& r : rows) {
      const double small = step_elements(a, r.layout, a.layers, r.op);
      const double large = step_elements(a, r.layout, 2 * a.layers, r.op);
      const double per_block = (large - small) / static_cast<double>(a.layers);
      if (deepspeed::comm::get_rank() == 0)
        std::printf("%-7s %-18s %-19.0f %-11.0f %.2f\n", r.layout, r.op, per_block, r.formula, per_block / r.formula);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_model_parallel_comm: %s\n", e.what());
    return 1;
  }
}
