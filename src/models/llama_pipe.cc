// llama_pipeline_layers (deepspeed/models/llama_pipe.h).
#include "deepspeed/models/llama_pipe.h"

#include <ATen/ATen.h>

#include "deepspeed/error.h"

namespace deepspeed::models {
namespace {

// The token embedding; its weight is also a tied head's.
class LlamaEmbeddingImpl : public torch::nn::Module {
 public:
  explicit LlamaEmbeddingImpl(const LlamaConfig& cfg) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
    at::NoGradGuard no_grad;
    embed_tokens->weight.normal_(0.0, cfg.initializer_range);
  }
  at::Tensor forward(const at::Tensor& tokens) { return embed_tokens->forward(tokens); }
  at::Tensor head(const at::Tensor& x) { return at::linear(x, embed_tokens->weight); }
  torch::nn::Embedding embed_tokens{nullptr};
};
TORCH_MODULE(LlamaEmbedding);

// A decoder layer that computes its own rotary cos/sin (a pipeline layer takes one tensor).
class LlamaPipeLayerImpl : public LlamaDecoderLayerImpl {
 public:
  explicit LlamaPipeLayerImpl(const LlamaConfig& cfg)
      : LlamaDecoderLayerImpl(cfg), cfg_(cfg), inv_freq_(rope_inverse_frequencies(cfg)) {
    cfg_.json.clear();  // one copy of the file's text per layer would be dead weight
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t seq = x.size(1);
    cfg_.check_sequence(seq);
    const at::Tensor positions = at::arange(seq, at::TensorOptions().dtype(at::kLong).device(x.device()));
    const auto [cos, sin] = rope_cos_sin(inv_freq_.to(x.device()), positions);
    return LlamaDecoderLayerImpl::forward(x, cos.to(x.scalar_type()), sin.to(x.scalar_type()));
  }

 private:
  LlamaConfig cfg_;  // for its sliding window
  at::Tensor inv_freq_;
};
TORCH_MODULE(LlamaPipeLayer);

}  // namespace

std::vector<pipe::LayerSpec> llama_pipeline_layers(const LlamaConfig& cfg) {
  DS_CHECK_T(ConfigError,
             !cfg.tensor_parallel.is_member() && !cfg.sequence_parallel.is_member() && !cfg.shard_layers &&
                 !cfg.gradient_checkpointing,
             "Llama pipeline layers: tensor or sequence parallelism, ZeRO-3 units and gradient_checkpointing are not "
             "built for them (pipeline.activation_checkpoint_interval checkpoints the layers)");
  auto embedding = [cfg] { return torch::nn::AnyModule(LlamaEmbedding(cfg)); };
  std::vector<pipe::LayerSpec> layers;
  if (cfg.tie_word_embeddings)
    layers.push_back(pipe::TiedLayerSpec("embed", "LlamaEmbedding", embedding, nullptr, {"embed_tokens.weight"}));
  else
    layers.emplace_back("LlamaEmbedding", embedding);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i)
    layers.emplace_back("LlamaDecoderLayer", [cfg] { return torch::nn::AnyModule(LlamaPipeLayer(cfg)); });
  layers.emplace_back("LlamaRMSNorm",
                      [cfg] { return torch::nn::AnyModule(LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)); });
  if (cfg.tie_word_embeddings) {
    layers.push_back(pipe::TiedLayerSpec(
        "embed", "LlamaEmbedding", embedding,
        [](torch::nn::Module& m, const at::Tensor& x) { return dynamic_cast<LlamaEmbeddingImpl&>(m).head(x); },
        {"embed_tokens.weight"}));
  } else {
    layers.emplace_back("Linear", [cfg] {
      torch::nn::Linear head(torch::nn::LinearOptions(cfg.hidden_size, cfg.vocab_size).bias(false));
      at::NoGradGuard no_grad;
      head->weight.normal_(0.0, cfg.initializer_range);
      return torch::nn::AnyModule(head);
    });
  }
  return layers;
}

at::Tensor llama_pipeline_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                /*weight=*/{}, at::Reduction::Mean, /*ignore_index=*/-100);
}

std::string llama_pipeline_hf_name(const LlamaConfig& cfg, const std::string& pipeline_name) {
  const std::string tied = "tied_modules.embed.";
  if (pipeline_name.rfind(tied, 0) == 0) return "model." + pipeline_name.substr(tied.size());
  const size_t dot = pipeline_name.find('.');
  DS_CHECK(dot != std::string::npos && dot > 0, "llama_pipeline_hf_name: '", pipeline_name,
           "' is not a pipeline layer's parameter");
  const int64_t index = std::stoll(pipeline_name.substr(0, dot));
  const std::string rest = pipeline_name.substr(dot + 1);
  const int64_t n = cfg.num_hidden_layers;
  if (index == 0) return "model." + rest;
  if (index <= n) return "model.layers." + std::to_string(index - 1) + "." + rest;
  if (index == n + 1) return "model.norm." + rest;
  return "lm_head." + rest;
}

}  // namespace deepspeed::models
