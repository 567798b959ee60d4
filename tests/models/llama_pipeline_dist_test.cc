// The Llama family as a 2-stage pipeline (deepspeed/models/llama_pipe.h): each stage loads its own layers from the
// transformers folder (the pipeline's names mapped to transformers'), the pipeline engine trains 3 SGD steps of 2
// micro-batches, and each stage writes its shard of an HF folder (write_hf_shard, then write_hf_index). Against the
// plain single-process LibTorch loop over the whole model (llama_reference.h): the losses, and the saved folder read
// back whole. A stage that loaded another stage's layers or a wrong tied embedding, a micro-batch's gradient not
// divided by the accumulation, or a shard missing from the index: each moves the losses or weights far past the bound.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/models/llama_pipe.h"
#include "deepspeed/pipe/engine.h"
#include "llama_reference.h"
#include "temp_dir.h"
#include "tolerance.h"

namespace {

namespace dm = deepspeed::models;
namespace dsp = deepspeed::pipe;
namespace comm = deepspeed::comm;
using llama_reference::batch;
using llama_reference::folder;
using llama_reference::kMicro;
using llama_reference::kSteps;

constexpr int kStages = 2, kGas = 2;

llama_reference::Run train_pipeline(const std::string& name, const std::string& save_dir) {
  const dm::LlamaConfig cfg = dm::LlamaConfig::from_file(folder(name) + "/config.json");
  dsp::PipelineModuleOptions o;
  o.layers = dm::llama_pipeline_layers(cfg);
  o.loss_fn = dm::llama_pipeline_loss;
  o.num_stages = kStages;
  o.partition_method = "uniform";
  dsp::PipelineModule module(o);
  dm::HfLoadOptions load;
  load.hf_name = [&](const std::string& n) { return dm::llama_pipeline_hf_name(cfg, n); };
  load.part_of_model = true;
  dm::load_hf_weights(*module, folder(name), load);
  auto engine = dsp::initialize(module, deepspeed::Config::from_string(
                                            R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                                                "steps_per_print": 1000, "gradient_clipping": 0.0,
                                                "optimizer": {"type": "SGD", "params": {"lr": 0.05}}})"));
  llama_reference::Run run;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(cfg.vocab_size, step, kGas);  // the global batch: kGas micro-batches of kMicro
    int m = 0;
    at::Tensor loss = engine.train_batch([&] {
      const int64_t first = (m++) * kMicro;
      return dsp::MicroBatch{x.narrow(0, first, kMicro), y.narrow(0, first, kMicro)};
    });
    run.losses.push_back(loss.item<double>());
  }
  // Each stage its own layers; a tied embedding once, from the first stage holding it.
  const bool first_of_tie = !cfg.tie_word_embeddings || module->tied_stages("embed").front() == module->stage_id();
  const auto weights = dm::gather_hf_weights(*module, std::nullopt, [&](const std::string& n) {
    return n.rfind("tied_modules.", 0) == 0 && !first_of_tie ? std::string() : dm::llama_pipeline_hf_name(cfg, n);
  });
  dm::write_hf_shard(save_dir, weights, module->stage_id(), kStages);
  comm::barrier();
  if (comm::get_rank() == 0) dm::write_hf_index(save_dir, kStages, cfg.json);
  comm::barrier();
  return run;
}

// The pipeline takes the plain loop's sums in another grouping (two micro-batches' gradients added, each divided by
// 2), over the same longest sums as llama_parallel_dist_test's bound.
TEST(LlamaPipeline, TwoStagesMatchPlainLibTorch) {
  if (!comm::is_initialized()) comm::init_distributed();
  ASSERT_EQ(comm::get_world_size(), kStages) << "one rank per stage";
  ASSERT_NE(std::getenv("DS_HF_MODELS"), nullptr) << "ctest sets DS_HF_MODELS";
  for (const char* name : {"llama", "qwen2"}) {
    SCOPED_TRACE(name);
    ds_test::TempDir base("llama_pipe");
    const std::string saved = llama_reference::shared_dir(base.path()) + "/saved";
    const llama_reference::Run want = llama_reference::plain_libtorch(name, kGas);
    const llama_reference::Run got = train_pipeline(name, saved);
    const double bound = tolerance::reordered(tolerance::kFp32Epsilon, 96 + kGas, kSteps);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t s = 0; s < want.losses.size(); ++s)
      EXPECT_WITHIN(std::abs(got.losses[s] - want.losses[s]) / want.losses[s], bound) << "step " << s;
    dm::LlamaForCausalLM back(dm::LlamaConfig::from_file(saved + "/config.json"));
    dm::load_hf_weights(*back, saved);
    for (const auto& p : back->named_parameters())
      EXPECT_WITHIN(tolerance::relative_max_error(p.value(), want.params.at(p.key())), bound) << p.key();
    comm::barrier();
  }
}

}  // namespace
