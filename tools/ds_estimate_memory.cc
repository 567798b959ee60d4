// ds_estimate_memory: per-rank memory for model states under each ZeRO stage, before a run, like
// DeepSpeed's estimate_zero{2,3}_model_states_mem_needs_all_cold.
//
//   ds_estimate_memory --params 1.3e9 --ranks 8 [--nodes 1] [--precision bf16|fp16|fp32] [--offload
//   cpu|nvme]
//                      [--bucket-size N] [--largest-layer N] [--paper]
//   ds_estimate_memory --model gpt --layers L --hidden H --vocab V --seq-len S [--untied_head]
//   [--no-bias] ...
//
// --ranks counts ranks per node, as DeepSpeed's num_gpus_per_node; the world size is ranks x nodes.
// --model gpt counts the parameters of our reference GPT (models/gpt.h, GPTConfig::num_parameters)
// and takes its largest ZeRO-3 unit (a block, or the embeddings and final LayerNorm left in the
// root unit) as the gathered layer. Bad input: one line `ds_estimate_memory: <message>` on stderr
// and exit 1.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>

#include "deepspeed/error.h"
#include "deepspeed/zero/memory_estimator.h"

namespace {

namespace zero = deepspeed::zero;

struct GptShape {
  int64_t layers = 0, hidden = 0, vocab = 0, seq_len = 0;
  bool untied_head = false;
  bool bias = true;
};

// The same count as models/gpt.cc's GPTConfig::num_parameters (tools use only the public API, so it
// is recomputed here); keep the two in step.
int64_t gpt_block_params(const GptShape& s) {
  const int64_t h = s.hidden, b = s.bias ? 1 : 0;
  return 2 * (2 * h)                // two LayerNorms (weight + bias)
         + (h * 3 * h + 3 * h * b)  // qkv
         + (h * h + h * b)          // attention projection
         + (h * 4 * h + 4 * h * b)  // MLP up
         + (4 * h * h + h * b);     // MLP down
}

// Token and position embeddings, the final LayerNorm and an untied head: what stays outside the
// blocks.
int64_t gpt_root_params(const GptShape& s) {
  int64_t root = s.vocab * s.hidden + s.seq_len * s.hidden + 2 * s.hidden;
  if (s.untied_head) root += s.vocab * s.hidden;
  return root;
}

int64_t to_count(double value, const char* flag) {
  DS_CHECK(std::isfinite(value) && value >= 1 && value <= 1e15, flag,
           " must be between 1 and 1e15, got ", value);
  return static_cast<int64_t>(std::llround(value));
}

}  // namespace

// Shape limits keep the GPT count inside int64_t; the estimator then rejects anything above 1e15
// params.
int main(int argc, char** argv) {
  CLI::App app{
      "Per-rank memory for parameters, gradients and optimizer states under each ZeRO stage."};
  double params = 0;
  int ranks = 1;
  int nodes = 1;
  std::string precision = "bf16";
  std::string offload = "none";
  double bucket_size = 0;
  double largest_layer = 0;
  bool paper = false;
  std::string model;
  GptShape gpt;

  auto* params_opt = app.add_option("--params", params, "total parameter count (e.g. 1.3e9)");
  app.add_option("--ranks", ranks, "ranks (GPUs) per node")->check(CLI::Range(1, 1000000));
  app.add_option("--nodes", nodes, "number of nodes")->check(CLI::Range(1, 1000000));
  app.add_option("--precision", precision, "working precision")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--offload", offload, "optimizer offload target")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option(
      "--bucket-size", bucket_size,
      "reduce_bucket_size in elements, to count stage 2's two fp32 buckets (0: not counted)");
  app.add_option("--largest-layer", largest_layer,
                 "parameters of the largest ZeRO-3 unit, gathered whole at stage 3");
  app.add_flag("--paper", paper,
               "print the ZeRO paper's formulas (mixed precision, K = 12) instead of our layout");
  auto* model_opt = app.add_option("--model", model, "count the parameters of a reference model")
                        ->check(CLI::IsMember({"gpt"}))
                        ->excludes(params_opt);
  app.add_option("--layers", gpt.layers, "GPT blocks")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->needs(model_opt);
  app.add_option("--hidden", gpt.hidden, "GPT hidden size")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->needs(model_opt);
  app.add_option("--vocab", gpt.vocab, "GPT vocabulary size")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))
      ->needs(model_opt);
  app.add_option("--seq-len", gpt.seq_len, "GPT context length")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))
      ->needs(model_opt);
  app.add_flag("--untied_head", gpt.untied_head, "GPT LM head not tied to the token embedding")
      ->needs(model_opt);
  bool no_bias = false;
  app.add_flag("--no-bias", no_bias, "GPT Linear layers without biases")->needs(model_opt);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "ds_estimate_memory: " << e.what() << "\n";
    return 1;
  }

  try {
    int64_t num_params = 0;
    int64_t largest = largest_layer > 0 ? to_count(largest_layer, "--largest-layer") : 0;
    DS_CHECK(bucket_size >= 0, "--bucket-size must be >= 0, got ", bucket_size);
    DS_CHECK(largest_layer >= 0, "--largest-layer must be >= 0, got ", largest_layer);
    if (model == "gpt") {
      DS_CHECK(gpt.layers > 0 && gpt.hidden > 0 && gpt.vocab > 0 && gpt.seq_len > 0,
               "--model gpt needs --layers, --hidden, --vocab and --seq-len");
      gpt.bias = !no_bias;
      const int64_t block = gpt_block_params(gpt);
      const int64_t root = gpt_root_params(gpt);
      num_params = root + gpt.layers * block;
      if (largest == 0) largest = std::max(block, root);
      std::cout << "GPT: " << num_params << " params (" << gpt.layers << " blocks of " << block
                << ", root unit " << root << "); largest ZeRO-3 unit " << largest << " params.\n";
    } else {
      DS_CHECK(*params_opt, "give --params N, or --model gpt with its shape");
      num_params = to_count(params, "--params");
    }

    static const std::map<std::string, zero::Precision> kPrecisions = {
        {"bf16", zero::Precision::kBf16},
        {"fp16", zero::Precision::kFp16},
        {"fp32", zero::Precision::kFp32}};
    static const std::map<std::string, zero::OffloadTarget> kTargets = {
        {"none", zero::OffloadTarget::kNone},
        {"cpu", zero::OffloadTarget::kCpu},
        {"nvme", zero::OffloadTarget::kNvme}};
    zero::EstimateTableOptions options;
    options.precision = kPrecisions.at(precision);
    options.offload_optimizer = kTargets.at(offload);
    options.largest_layer_params = largest;
    options.reduce_bucket_size = bucket_size > 0 ? to_count(bucket_size, "--bucket-size") : 0;
    options.num_nodes = nodes;
    options.paper_formula = paper;
    DS_CHECK(static_cast<int64_t>(ranks) * nodes <= 1000000,
             "--ranks x --nodes must be <= 1000000, got ", static_cast<int64_t>(ranks) * nodes);
    std::cout << zero::format_memory_estimates(num_params, ranks * nodes, options);
    return 0;
  } catch (const deepspeed::Error& e) {
    std::cerr << "ds_estimate_memory: " << e.what() << "\n";
    return 1;
  }
}
