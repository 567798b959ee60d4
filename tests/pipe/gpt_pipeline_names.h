// Shared by the GPT pipeline tests: the name models::GPT gives a parameter of the GPT pipeline
// layers (models/gpt_pipe.h), so the two models can be compared parameter by parameter.
#pragma once

#include <cstdint>
#include <string>

namespace gpt_pipeline_names {

// "tied_modules.embed.wte.weight" -> "wte.weight", "0.wpe.weight" -> "wpe.weight" (untied
// embedding), "3.attn.qkv.weight" -> "blocks.2.attn.qkv.weight", "<layers + 1>.weight" ->
// "ln_f.weight",
// "<layers + 2>.weight" -> "lm_head.weight" (untied head).
inline std::string gpt_name(const std::string& pipe_name, int64_t layers) {
  const std::string tied = "tied_modules.embed.";
  if (pipe_name.rfind(tied, 0) == 0) return pipe_name.substr(tied.size());
  const size_t dot = pipe_name.find('.');
  const int64_t index = std::stoll(pipe_name.substr(0, dot));
  const std::string rest = pipe_name.substr(dot + 1);
  if (index == 0) return rest;
  if (index <= layers) return "blocks." + std::to_string(index - 1) + "." + rest;
  if (index == layers + 1) return "ln_f." + rest;
  return "lm_head." + rest;
}

}  // namespace gpt_pipeline_names
