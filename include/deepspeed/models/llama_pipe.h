// The Llama family (deepspeed/models/llama.h) as pipeline layers for deepspeed::pipe::PipelineModule, as DeepSpeed's
// pipeline users write their models: the token embedding, one layer per decoder layer (each computing its rotary
// cos/sin for positions 0..seq-1), the final RMSNorm and the head, which with tied embeddings is a second occurrence
// of the embedding ("embed"). The pipeline's parameter names map to transformers' (llama_pipeline_hf_name), so
// load_hf_weights fills each stage from the folder and write_hf_shard / write_hf_index save it back.
//
//   pipe::PipelineModuleOptions o;
//   o.layers = models::llama_pipeline_layers(cfg);
//   o.loss_fn = models::llama_pipeline_loss;
//   o.num_stages = 2;
//   pipe::PipelineModule module(o);
//   models::HfLoadOptions load;
//   load.hf_name = [&](const std::string& n) { return models::llama_pipeline_hf_name(cfg, n); };
//   load.part_of_model = true;
//   models::load_hf_weights(*module, "Qwen2.5-0.5B", load);
//
// Not with tensor or sequence parallelism, or ZeRO-3 units (refused by name).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "deepspeed/models/llama.h"
#include "deepspeed/pipe/module.h"

namespace deepspeed::models {

std::vector<pipe::LayerSpec> llama_pipeline_layers(const LlamaConfig& cfg);

// Mean next-token cross-entropy (in fp32, -100 ignored) of logits [batch, seq, vocab] against targets [batch, seq].
at::Tensor llama_pipeline_loss(const at::Tensor& logits, const at::Tensor& targets);

// transformers' name of a parameter of llama_pipeline_layers' PipelineModule: "0.embed_tokens.weight" or
// "tied_modules.embed.embed_tokens.weight" -> "model.embed_tokens.weight", "<i>.<rest>" (1 <= i <= layers) ->
// "model.layers.<i-1>.<rest>", "<layers+1>.weight" -> "model.norm.weight", "<layers+2>.weight" -> "lm_head.weight".
std::string llama_pipeline_hf_name(const LlamaConfig& cfg, const std::string& pipeline_name);

}  // namespace deepspeed::models
