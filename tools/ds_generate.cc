// ds_generate: continue text with a Hugging Face model folder (config.json, safetensors, tokenizer.json or
// tokenizer.model, generation_config.json), through deepspeed::init_inference and generate with a KV cache:
//
//   ds_generate --model_dir Llama-3.2-1B --prompt "The capital of France is" --max_new_tokens 32
//   ds_generate --model_dir DIR --prompt "Once" --temperature 0.8 --top_p 0.9 --seed 1
//   deepspeed --num_procs 2 ds_generate --model_dir DIR --tp_size 2 --prompt "..."   # tensor parallel
//   ds_generate --model_dir DIR --checkpoint CKPT_DIR --prompt "..."   # weights from a ZeRO training checkpoint
//
// The folder's generation_config.json (else config.json's stop tokens) gives the defaults, as transformers' generate
// takes them; --temperature,
// --top_k and --top_p turn sampling on, --greedy off. Each --prompt is tokenized with the special tokens (a BOS) as
// transformers' tokenizer(prompt) does, all prompts generated as one batch, and rank 0 prints each continuation
// (special tokens skipped) on its own line block, after "=== prompt i ===" when there are several. Exit 1 with one
// line for a bad folder or setting.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/arguments.h"
#include "deepspeed/comm.h"
#include "deepspeed/data/tokenizer.h"
#include "deepspeed/inference/engine.h"
#include "deepspeed/inference/generation_config.h"
#include "deepspeed/inference/inference_config.h"

namespace {

namespace di = deepspeed::inference;

struct Options {
  std::string model_dir;
  std::vector<std::string> prompts;
  std::optional<int64_t> max_new_tokens;
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  bool greedy = false;
  bool print_ids = false;
  int tp_size = 1;
  std::string dtype = "fp32";
  std::string inference_config;
  std::string checkpoint;  // a ZeRO training checkpoint's folder: the weights (model_dir: config.json, tokenizer)
};

// The folder's generation_config.json (transformers' defaults without one), then the command line over it.
di::GenerationConfig generation_config(const Options& o) {
  // Without a generation_config.json, the stop and pad tokens of config.json, as transformers'
  // GenerationConfig.from_model_config takes them.
  std::string file = o.model_dir + "/generation_config.json";
  if (!std::filesystem::exists(file)) file = o.model_dir + "/config.json";
  di::GenerationConfig g =
      std::filesystem::exists(file) ? di::GenerationConfig::from_file(file) : di::GenerationConfig();
  if (o.max_new_tokens) {
    g.max_new_tokens = *o.max_new_tokens;
    g.max_length.reset();
  }
  if (o.temperature || o.top_p || o.top_k) g.do_sample = true;
  if (o.temperature) g.temperature = *o.temperature;
  if (o.top_p) g.top_p = *o.top_p;
  if (o.top_k) g.top_k = *o.top_k;
  if (o.repetition_penalty) g.repetition_penalty = *o.repetition_penalty;
  if (o.greedy) g.do_sample = false;
  g.seed = o.seed;
  g.check("ds_generate");
  return g;
}

di::InferenceConfig inference_config(const Options& o) {
  di::InferenceConfig c =
      o.inference_config.empty() ? di::InferenceConfig() : di::InferenceConfig::from_file(o.inference_config);
  if (o.inference_config.empty()) c.dtype = di::InferenceConfig::parse_dtype(o.dtype, "--dtype");
  if (o.tp_size > 1) c.tp_size = o.tp_size;
  return c;
}

int run(const Options& o) {
  const auto tokenizer = deepspeed::data::Tokenizer::from_file(o.model_dir);
  const di::GenerationConfig g = generation_config(o);
  di::InferenceConfig ic = inference_config(o);
  std::vector<std::vector<int64_t>> prompts;
  for (const std::string& p : o.prompts) prompts.push_back(tokenizer->encode(p, /*add_special_tokens=*/true));
  // The cache holds what this call needs when the config leaves max_out_tokens at its default.
  if (o.inference_config.empty()) ic.max_out_tokens = std::max(ic.max_out_tokens, di::positions_needed(prompts, g));
  auto engine = deepspeed::init_inference(o.model_dir, ic, o.checkpoint);
  const di::GenerateResult out = engine.generate(prompts, g);
  if (deepspeed::comm::is_initialized() && deepspeed::comm::get_rank() != 0) return 0;
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    if (out.tokens.size() > 1) std::printf("=== prompt %zu ===\n", i);
    std::printf("%s\n", tokenizer->decode(out.tokens[i], /*skip_special_tokens=*/true).c_str());
    if (o.print_ids) {
      std::string ids;
      for (const int64_t t : out.tokens[i]) ids += (ids.empty() ? "" : " ") + std::to_string(t);
      std::printf("ids: %s\n", ids.c_str());
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  deepspeed::strip_launcher_args(argc, argv);  // the launcher's --local_rank
  Options o;
  CLI::App app{"Continue text with a Hugging Face model folder (greedy or sampled, KV-cached, tensor parallel)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model_dir", o.model_dir, "Hugging Face folder: config.json, safetensors, tokenizer")->required();
  app.add_option("--prompt", o.prompts, "text to continue (repeat for a batch)")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--max_new_tokens", o.max_new_tokens, "tokens to add (default: the folder's generation config)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--temperature", o.temperature, "sample at this temperature")->check(deepspeed::check_at_least(0));
  app.add_option("--top_p", o.top_p, "sample from the smallest set of tokens with this probability");
  app.add_option("--top_k", o.top_k, "sample from the k most likely tokens (0: all)")
      ->check(deepspeed::check_at_least(0));
  app.add_option("--repetition_penalty", o.repetition_penalty, "divide the scores of tokens already present");
  app.add_option("--seed", o.seed, "the sampler's seed");
  app.add_flag("--greedy", o.greedy, "greedy decoding, whatever the folder's generation config says");
  app.add_flag("--print_ids", o.print_ids, "print the new token ids too");
  app.add_option("--tp_size", o.tp_size, "split the model over this many ranks (start them with the launcher)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--dtype", o.dtype, "fp32, bf16 or fp16 (without --inference_config)");
  app.add_option("--inference_config", o.inference_config, "a deepspeed.init_inference config (JSON)");
  app.add_option("--checkpoint", o.checkpoint,
                 "take the weights from this ZeRO training checkpoint (its latest tag) instead of the folder's "
                 "safetensors; --model_dir still gives config.json and the tokenizer");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_generate: error: %s\n", e.what());
    return 1;
  }
}
