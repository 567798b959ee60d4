// Shared by the Llama family's multi-rank tests: the folders make_hf_models.py wrote (DS_HF_MODELS), the batches,
// and the plain single-process LibTorch loop every layout is compared with: the whole model loaded from the same
// folder, SGD written out as p - lr x g over the global batch.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"

namespace llama_reference {

namespace dm = deepspeed::models;
namespace comm = deepspeed::comm;

constexpr int64_t kMicro = 2, kSeq = 12;
constexpr int kSteps = 3;
constexpr double kLr = 0.05;

inline std::string folder(const std::string& name) {
  const char* d = std::getenv("DS_HF_MODELS");
  return std::string(d != nullptr ? d : "") + "/" + name;
}

// Positions that train in an SFT-like batch (`sft`): the last kSftTrained of each sequence (the "response"); the
// others' targets are -100. Under sequence parallelism at 2 or 4 ranks they all lie in the last rank's part.
constexpr int64_t kSftTrained = 3;

// The sequence length of step `step`: kSeq, or with `variable` lengths 12, 9, 7 (neither of the last two divides by
// 2 or 4 ranks: sequence parallelism pads them).
inline int64_t step_length(int step, bool variable) {
  constexpr int64_t kVariable[] = {kSeq, 9, 7};
  return variable ? kVariable[step % 3] : kSeq;
}

// Global batch of step `step`: world x kMicro sequences; rank r's micro-batch is rows [r * kMicro, (r + 1) * kMicro).
inline std::pair<at::Tensor, at::Tensor> batch(int64_t vocab, int step, int world, bool sft = false,
                                               bool variable = false) {
  at::Generator g = at::detail::createCPUGenerator(1000 + step);
  const int64_t seq = step_length(step, variable);
  const at::Tensor tokens = at::randint(vocab, {world * kMicro, seq + 1}, g, at::kLong);
  at::Tensor targets = tokens.narrow(1, 1, seq).clone();
  if (sft) targets.narrow(1, 0, seq - kSftTrained).fill_(-100);
  return {tokens.narrow(1, 0, seq), targets};
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
};

inline Run plain_libtorch(const std::string& name, int world, bool sft = false, bool variable = false) {
  dm::LlamaForCausalLM model(dm::LlamaConfig::from_file(folder(name) + "/config.json"));
  dm::load_hf_weights(*model, folder(name));
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(model->config().vocab_size, step, world, sft, variable);
    for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor loss = model->forward(x, y);
    loss.backward();
    at::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.sub_(kLr * p.grad());
    run.losses.push_back(loss.item<double>());
  }
  for (const auto& p : model->named_parameters()) run.params[p.key()] = p.value().detach().clone();
  return run;
}

// Rank 0's temporary folder, the same path on every rank (the ranks share this host).
inline std::string shared_dir(const std::string& mine) {
  at::Tensor bytes = at::zeros({256}, at::kByte);
  if (comm::get_rank() == 0) std::memcpy(bytes.data_ptr(), mine.data(), std::min<size_t>(mine.size(), 255));
  comm::get_world_group().broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes.data_ptr()));
}

}  // namespace llama_reference
