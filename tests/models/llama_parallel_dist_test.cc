// The Llama family split over the ranks of the job, each layout loaded from the transformers folder, trained by the
// engine, gathered (gather_hf_weights) and saved as an HF folder:
//  - ZeRO stage 3: built under zero::Init with each decoder layer a unit (and the embedding and head when untied),
//    each rank reading only its own partitions;
//  - tensor parallelism over 2 ranks (LlamaConfig::tensor_parallel, tensor_parallel.autotp_size 2), each rank
//    reading only its slices, ZeRO stage 1 over the data-parallel rest;
//  - Ulysses sequence parallelism over 2 ranks (LlamaConfig::sequence_parallel), each rank its half of every
//    sequence (rotary positions from the half's first token), ZeRO stage 2.
// Against a plain single-process LibTorch loop over the whole model loaded from the same folder, SGD written out, the
// global batch of every data-parallel replica's micro-batches. A rank that loaded another rank's partition or slice,
// or loaded nothing (the random initial values stay), a gradient not averaged over the replicas, or a save that
// gathers no partition or joins the slices wrongly: each moves the losses or weights far past the bound.
// DS_HF_MODELS: make_hf_models.py's folders.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/checkpointing.h"
#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/sequence/layer.h"
#include "deepspeed/sequence/shard.h"
#include "deepspeed/tp/groups.h"
#include "deepspeed/zero.h"
#include "llama_reference.h"
#include "temp_dir.h"
#include "tolerance.h"

namespace {

namespace dm = deepspeed::models;
namespace comm = deepspeed::comm;
using llama_reference::batch;
using llama_reference::folder;
using llama_reference::kMicro;
using llama_reference::kSeq;
using llama_reference::kSteps;
using llama_reference::plain_libtorch;
using llama_reference::Run;
using llama_reference::shared_dir;

struct Layout {
  int stage = 0;
  int tp = 1;
  int sp = 1;
  bool checkpointing = false;  // activation checkpointing per decoder layer
  bool bf16 = false;           // bf16 weights and activations, fp32 masters (the config's bf16 section)
  bool offload = false;        // offload_optimizer and (at stage 3) offload_param to the CPU
  bool fp16 = false;           // fp16 weights and activations, fp32 masters, dynamic loss scaling
  int64_t tiled_mlp = 0;       // LlamaConfig::tiled_mlp_tokens
  int64_t tiled_loss = 0;      // LlamaConfig::tiled_loss_tokens
  bool sft = false;            // targets -100 but on the last positions (llama_reference::batch)
  bool variable = false;       // sequence lengths 12, 9, 7 (llama_reference::step_length)
};

Run train_parallel(const std::string& name, Layout layout, const std::string& save_dir) {
  const deepspeed::Config config = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
          "gradient_clipping": 0.0, "optimizer": {"type": "SGD", "params": {"lr": 0.05}},
          "tensor_parallel": {"autotp_size": )" +
      std::to_string(layout.tp) + R"(}, "sequence_parallel_size": )" + std::to_string(layout.sp) +
      R"(, "zero_optimization": {"stage": )" + std::to_string(layout.stage) +
      (layout.offload ? std::string(R"(, "offload_optimizer": {"device": "cpu"})") +
                            (layout.stage == 3 ? R"(, "offload_param": {"device": "cpu"})" : "")
                      : std::string()) +
      R"(, "stage3_param_persistence_threshold": 0}, "bf16": {"enabled": )" + (layout.bf16 ? "true" : "false") +
      R"(}, "fp16": {"enabled": )" + (layout.fp16 ? "true" : "false") + "}}");
  dm::LlamaConfig cfg = dm::LlamaConfig::from_file(folder(name) + "/config.json");
  cfg.shard_layers = layout.stage == 3;
  cfg.gradient_checkpointing = layout.checkpointing;
  cfg.tiled_mlp_tokens = layout.tiled_mlp;
  cfg.tiled_loss_tokens = layout.tiled_loss;
  if (layout.tp > 1) cfg.tensor_parallel = deepspeed::tp::tensor_parallel_groups(layout.tp).tensor_parallel;
  if (layout.sp > 1) cfg.sequence_parallel = deepspeed::sequence::sequence_parallel_groups(layout.sp).sequence_parallel;
  dm::LlamaForCausalLM model = [&] {
    deepspeed::zero::Init init(config);
    return dm::LlamaForCausalLM(cfg);
  }();
  dm::load_hf_weights(*model, folder(name));
  // At stage 3 each layer's parameters are this rank's partition only: none is whole here.
  if (layout.stage == 3) {
    for (const auto& p : model->named_parameters()) {
      if (p.key().find("layers.") != std::string::npos) {
        EXPECT_EQ(p.value().numel(), 0) << p.key();
      }
    }
  }
  auto engine = deepspeed::initialize(model, config);
  if (layout.bf16) {
    EXPECT_EQ(model->parameters().front().scalar_type(), at::kBFloat16);
  }
  if (layout.fp16) {
    EXPECT_EQ(model->parameters().front().scalar_type(), at::kHalf);
  }
  if (layout.offload) {
    // The offload is taken, not ignored: the optimizer's states (and at stage 3 the partitions) are host buffers.
    const auto held = engine.model_state_bytes();
    EXPECT_GE(held.offloaded_to_host,
              held.master_weights + held.optimizer_states + (layout.stage == 3 ? held.params : 0));
    EXPECT_GT(held.offloaded_to_host, 0);
  }
  const int64_t recomputed_before = deepspeed::checkpointing::stats().recomputes;
  // Consecutive ranks share a replica (tensor or sequence parallel); a sequence-parallel rank holds its part of
  // each sequence (deepspeed::sequence::shard_sequence: padded when the ranks do not divide its length).
  const int replica = layout.tp * layout.sp, dp = comm::get_world_size() / replica, d = comm::get_rank() / replica;
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(cfg.vocab_size, step, dp, layout.sft, layout.variable);
    const auto shard = deepspeed::sequence::shard_sequence(x.narrow(0, d * kMicro, kMicro),
                                                           y.narrow(0, d * kMicro, kMicro), cfg.sequence_parallel);
    at::Tensor loss = engine.forward(shard.input_ids, shard.labels);
    engine.backward(loss);
    engine.step();
    at::Tensor mean = loss.detach().clone();
    comm::get_world_group().all_reduce(mean, comm::ReduceOp::kAvg);
    run.losses.push_back(mean.item<double>());
  }
  // Checkpointing reran each decoder layer in each step's backward (and nothing else did).
  EXPECT_EQ(deepspeed::checkpointing::stats().recomputes - recomputed_before,
            layout.checkpointing ? kSteps * cfg.num_hidden_layers : 0);
  const auto weights = dm::gather_hf_weights(*model);
  if (comm::get_rank() == 0) dm::save_hf_folder(save_dir, weights, cfg.json);
  comm::barrier();
  for (auto& [key, value] : weights) run.params[key] = value;
  return run;
}

// SGD: the engine takes the same sums as the plain loop in another grouping (each rank's half of the batch, averaged
// over the ranks; the same layer gathered from partitions). The longest sum is a matmul over intermediate_size (64)
// or the softmax over the vocabulary (96) terms, plus the ranks' average; errors add over the steps.
void expect_plain_libtorch(const std::string& name, Layout layout) {
  SCOPED_TRACE(name + ", ZeRO stage " + std::to_string(layout.stage) + ", tp " + std::to_string(layout.tp) + ", sp " +
               std::to_string(layout.sp));
  const int dp = comm::get_world_size() / (layout.tp * layout.sp);
  ds_test::TempDir base("llama_parallel");
  const std::string saved = shared_dir(base.path()) + "/saved";
  const Run want = plain_libtorch(name, dp, layout.sft, layout.variable);
  const Run got = train_parallel(name, layout, saved);
  const double bound = tolerance::reordered(tolerance::kFp32Epsilon, 96 + dp + layout.tp + layout.sp, kSteps);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_WITHIN(std::abs(got.losses[s] - want.losses[s]) / want.losses[s], bound) << "step " << s;
  for (const auto& [key, value] : want.params)
    EXPECT_WITHIN(tolerance::relative_max_error(got.params.at(key), value), bound) << key;
  // The saved folder is the trained model, read back whole.
  dm::LlamaForCausalLM back(dm::LlamaConfig::from_file(saved + "/config.json"));
  dm::load_hf_weights(*back, saved);
  for (const auto& p : back->named_parameters()) EXPECT_TRUE(at::equal(p.value(), got.params.at(p.key()))) << p.key();
  comm::barrier();
}

TEST(LlamaParallel, Zero3MatchesPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  for (const char* name : {"llama", "qwen2"}) expect_plain_libtorch(name, Layout{3, 1});
}

// Optimizer states and (at stage 3) the parameters' partitions offloaded to host memory: the same sums, so the same
// bound as in device memory.
TEST(LlamaParallel, OffloadMatchesPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  for (int stage : {2, 3}) {
    Layout offload{stage};
    offload.offload = true;
    expect_plain_libtorch("llama", offload);
  }
}

// Each decoder layer recomputed in backward gives the plain loop's gradients, also with its parameters gathered again
// for the recomputation at ZeRO-3.
TEST(LlamaParallel, ActivationCheckpointingMatchesPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  for (int stage : {2, 3}) expect_plain_libtorch("llama", Layout{stage, 1, 1, /*checkpointing=*/true});
}

// Sequence tiling (ALST): the MLP 5 and the loss 7 positions at a time (neither divides a micro-batch's 24) give the
// untiled plain loop's losses and weights: at ZeRO-2; at ZeRO-3 with each layer's MLP tiled inside its unit and
// recomputed by activation checkpointing; and with the tied head of Qwen2 at ZeRO-3 (the loss tiled over the
// embedding's weight). Each tile's sums are the untiled ones' (a weight's gradient adds its tiles' parts: the same
// terms in another grouping), so the bound is the fp32 layouts'.
TEST(LlamaParallel, SequenceTilingMatchesPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  Layout zero2{2};
  zero2.tiled_mlp = 5;
  zero2.tiled_loss = 7;
  expect_plain_libtorch("llama", zero2);
  Layout zero3{3, 1, 1, /*checkpointing=*/true};
  zero3.tiled_mlp = 5;
  expect_plain_libtorch("llama", zero3);
  Layout tied{3};
  tied.tiled_mlp = 5;
  tied.tiled_loss = 7;
  expect_plain_libtorch("qwen2", tied);
}

// The largest relative difference over the steps between the losses of `layout` and of the plain fp32 loop.
double worst_loss_difference_from_plain(const Layout& layout, const std::string& temp_name) {
  const llama_reference::Run want = plain_libtorch("llama", comm::get_world_size());
  ds_test::TempDir base(temp_name);
  const llama_reference::Run got = train_parallel("llama", layout, shared_dir(base.path()) + "/saved");
  double worst = 0;
  for (size_t s = 0; s < want.losses.size(); ++s)
    worst = std::max(worst, std::abs(got.losses[s] - want.losses[s]) / want.losses[s]);
  return worst;
}

// bf16 at ZeRO-2 against the plain fp32 loop: the weights and activations are bf16 (8 bits of mantissa), the masters
// fp32, so the losses differ by bf16 roundings that largely average out over the vocabulary's softmax, not by
// fp32's. Measured worst relative loss difference over the steps: 1.5e-4 at AVX2, 9.3e-5 at AVX-512 (the bound is 4x
// that). The fp32 layouts above differ by at most 2e-7, so a run that silently trained in fp32 falls below the
// control's 100 fp32 epsilons (1.2e-5); a dropped step (a later loss off by a step's change, ~1e-2) exceeds the
// bound.
TEST(LlamaParallel, Bf16StaysWithinBf16RoundingOfPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  Layout bf16;
  bf16.stage = 2;
  bf16.bf16 = true;
  const double worst = worst_loss_difference_from_plain(bf16, "llama_bf16");
  EXPECT_WITHIN(worst, tolerance::measured(1.507e-4, 9.308e-5));
  EXPECT_GT(worst, 100 * tolerance::kFp32Epsilon) << "it did not train in bf16";
}

// fp16 at ZeRO-3 (DeepSpeed's defaults: dynamic loss scale from 2^16) against the plain fp32 loop: fp16 rounding
// (11 bits of mantissa). Measured worst relative loss difference: 3.6e-5 at AVX2, 3.0e-5 at AVX-512 (bound 4x). No
// step may be skipped for overflow: a skipped step leaves a later loss a step's change (~1e-2) away.
TEST(LlamaParallel, Fp16StaysWithinFp16RoundingOfPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  Layout fp16;
  fp16.stage = 3;
  fp16.fp16 = true;
  const double worst = worst_loss_difference_from_plain(fp16, "llama_fp16");
  EXPECT_WITHIN(worst, tolerance::measured(3.602e-5, 2.969e-5));
  EXPECT_GT(worst, 10 * tolerance::kFp32Epsilon) << "it did not train in fp16";
}

TEST(LlamaParallel, TensorParallelMatchesPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  for (const char* name : {"llama", "qwen2", "qwen3"}) expect_plain_libtorch(name, Layout{1, 2});
  // Mistral's one key/value head cannot be split over 2 ranks: refused by key before anything is built.
  dm::LlamaConfig mistral = dm::LlamaConfig::from_file(folder("mistral") + "/config.json");
  mistral.tensor_parallel = deepspeed::tp::tensor_parallel_groups(2).tensor_parallel;
  try {
    dm::LlamaForCausalLM m(mistral);
    ADD_FAILURE() << "a key/value head split over 2 ranks was accepted";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_STREQ(e.what(), "config.json: num_key_value_heads 1 does not split over 2 tensor-parallel ranks");
  }
}

// Ulysses over every rank of the run (2, or 4 in llama_ulysses_dist_4ranks): grouped-query attention with as many
// key/value heads as ranks or more, and with fewer (Mistral's one, Llama's two at 4 ranks: each repeated to one per
// rank, as UlyssesSPAttentionHF does), and Qwen3's q/k norms, at ZeRO stage 2; Llama at stages 0 and 1 and at 3
// with offload; then an SFT-like batch whose trained
// positions all lie in the last rank's part (the other ranks count none), at ZeRO-2 and, with the loss tiled, at
// ZeRO-3: the loss is the whole sequences' mean, so the gradients are the single process's. A per-rank mean would
// give the other ranks 0/0 and weigh the last one by the number of ranks. Last, a sequence length per step (12, 9, 7)
// that the ranks do not always divide: shard_sequence pads the end with ignored targets.
TEST(LlamaParallel, UlyssesMatchesPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  const int sp = comm::get_world_size();
  for (const char* name : {"llama", "qwen3", "mistral"}) expect_plain_libtorch(name, Layout{2, 1, sp});
  // Composed with the other ZeRO stages, and with optimizer and parameter offload to host memory at stage 3.
  for (int stage : {0, 1}) expect_plain_libtorch("llama", Layout{stage, 1, sp});
  Layout offload{3, 1, sp};
  offload.offload = true;
  expect_plain_libtorch("llama", offload);
  Layout sft{2, 1, sp};
  sft.sft = true;
  expect_plain_libtorch("llama", sft);
  Layout sft3{3, 1, sp};
  sft3.sft = true;
  sft3.tiled_mlp = 5;
  sft3.tiled_loss = 4;
  expect_plain_libtorch("qwen2", sft3);
  // A length per step, two of them padded to a multiple of the ranks (seq_length_is_variable), with the loss tiled.
  Layout variable{2, 1, sp};
  variable.variable = true;
  variable.tiled_loss = 4;
  expect_plain_libtorch("llama", variable);
  // Three key/value heads neither split over nor divide 2 ranks: refused by key before anything is built.
  dm::LlamaConfig odd = dm::LlamaConfig::from_json(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 96,
      "hidden_size": 48, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 6,
      "num_key_value_heads": 3})");
  odd.sequence_parallel = deepspeed::sequence::sequence_parallel_groups(2).sequence_parallel;
  try {
    dm::LlamaForCausalLM m(odd);
    ADD_FAILURE() << "3 key/value heads over 2 sequence-parallel ranks were accepted";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("num_key_value_heads 3 neither splits over nor divides"));
  }
}

// A sharded folder at ZeRO-3: loading into a model built under zero::Init grows each rank's peak RSS (the kernel's
// VmHWM, reset after the build) by less than its share of the model (the model's bytes / ranks): the loader writes
// into the partitions the build made and holds nothing but the mapped pages of the tensor it is copying, which it
// gives back. A loader that read whole tensors or kept the pages it touched would hold the whole model (60 MB in
// fp32 here: untied, 16 layers, an 8000-word vocabulary, written by rank 0 first in 16 MB shards). The build's own
// growth is printed beside it (zero::Init's: the partitions plus one unit whole at a time, and what the C allocator
// keeps of the freed units: issue 55).
TEST(LlamaParallel, ShardedLoadAtZero3HoldsLessThanItsShare) {
  if (!comm::is_initialized()) comm::init_distributed();
  ds_test::TempDir base("llama_rss");
  const std::string dir = shared_dir(base.path()) + "/big";
  const std::string json = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 8000, "hidden_size": 256,
      "intermediate_size": 688, "num_hidden_layers": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
      "tie_word_embeddings": false})";
  dm::LlamaConfig cfg = dm::LlamaConfig::from_json(json);
  const int64_t model_bytes = cfg.num_parameters() * 4;
  if (comm::get_rank() == 0) {
    dm::LlamaForCausalLM whole(cfg);
    std::vector<std::pair<std::string, at::Tensor>> weights;
    for (const auto& p : whole->named_parameters()) weights.emplace_back(p.key(), p.value());
    dm::HfSaveOptions options;
    options.max_shard_bytes = 16 << 20;
    dm::save_hf_folder(dir, weights, cfg.json, options);
  }
  comm::barrier();
  auto& acc = deepspeed::accelerator::get_accelerator();
  const deepspeed::Config config = deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3}})");
  cfg.shard_layers = true;
  {
    acc.reset_peak_memory_stats();
    const int64_t before_build = acc.memory_stats().allocated_bytes;
    dm::LlamaForCausalLM model = [&] {
      deepspeed::zero::Init init(config);
      return dm::LlamaForCausalLM(cfg);
    }();
    const int64_t built = acc.memory_stats().peak_allocated_bytes - before_build;
    acc.reset_peak_memory_stats();
    const int64_t before_load = acc.memory_stats().allocated_bytes;
    dm::load_hf_weights(*model, dir);
    const int64_t loaded = acc.memory_stats().peak_allocated_bytes - before_load;
    std::fprintf(stderr,
                 "rank %d: a %.1f MB model: build under zero::Init grew the peak RSS %.1f MB, the load %.1f MB\n",
                 comm::get_rank(), model_bytes / 1048576.0, built / 1048576.0, loaded / 1048576.0);
    EXPECT_LT(loaded, model_bytes / comm::get_world_size());
  }
  comm::barrier();
}

}  // namespace
