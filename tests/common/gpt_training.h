// What the tests that train the reference GPT under several layouts against a plain LibTorch loop share: the
// dataset, the micro-batches a data-parallel replica feeds its engine (as train_gpt does), parameter snapshots by
// name and the relative error of a per-step series.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "gpt.h"

namespace gpt_training {

// `samples` windows of seq_len + 1 random tokens below `vocab`, the same in every process.
inline at::Tensor dataset(int64_t vocab, int64_t seq_len, int64_t samples) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4321);
  return at::randint(vocab, {samples, seq_len + 1}, gen, at::kLong);
}

// Micro-batch `m` (of `micro` samples, `gas` per step) of data-parallel replica `d` of `dp` at `step`, shuffled by
// `seed`: inputs and next-token targets.
inline std::pair<at::Tensor, at::Tensor> micro_batch(const at::Tensor& data, int step, int d, int dp, int m,
                                                     int64_t micro, int64_t gas, uint64_t seed) {
  deepspeed::DataParallelSampler sampler(data.size(0), micro, gas, d, dp, seed);
  at::Tensor batch = data.index_select(0, at::tensor(sampler.micro_batch(step, m), at::kLong));
  const int64_t seq = data.size(1) - 1;
  return {batch.narrow(1, 0, seq), batch.narrow(1, 1, seq)};
}

inline std::map<std::string, at::Tensor> snapshot(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m.named_parameters())
    out[item.key()] = item.value().detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  return out;
}

// Largest |got - want| / |want| over the steps; huge when the series differ in length.
inline double max_series_error(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t s = 0; s < got.size() && s < want.size(); ++s)
    worst = std::max(worst, std::abs(got[s] - want[s]) / std::abs(want[s]));
  return got.size() == want.size() ? worst : 1e300;
}

// This tensor rank's slice of the whole parameter `want` (of the plain GPT), found by shape, not by our layers: the
// dimension whose size is `tp` times `got`'s; the rows of q/k/v ("qkv" in the name) are three blocks, each split.
// `want` itself when the shapes agree (a parameter the layers keep whole).
inline at::Tensor my_slice(const std::string& name, const at::Tensor& want, const at::Tensor& got, int tp,
                           int tp_rank) {
  if (got.sizes() == want.sizes()) return want;
  for (int64_t d = 0; d < want.dim(); ++d) {
    if (got.size(d) * tp != want.size(d)) continue;
    if (name.find("qkv") != std::string::npos) {
      std::vector<int64_t> blocks(want.sizes().begin(), want.sizes().end());
      blocks[0] /= 3;
      blocks.insert(blocks.begin(), 3);
      return want.reshape(blocks).narrow(1, tp_rank * blocks[1] / tp, blocks[1] / tp).reshape(got.sizes());
    }
    return want.narrow(d, tp_rank * got.size(d), got.size(d));
  }
  throw std::invalid_argument(name + ": shape " + c10::str(got.sizes()) + " is no slice of " + c10::str(want.sizes()));
}

// Parameters by name after training, each step's loss (mean over the global batch) and gradient norm.
struct Trained {
  std::map<std::string, at::Tensor> params;
  std::vector<double> losses, norms;
};

struct ReferenceRun {
  int dp = 1;  // data-parallel replicas whose micro-batches make the global batch
  int64_t micro = 2, gas = 2, samples = 64;
  int steps = 4;
  uint64_t data_seed = 5;
  std::string optimizer = "SGD";  // or "Adam" (torch::optim's)
  double sgd_lr = 0.1, adam_lr = 3e-3;
  double lr_factor = 1.0;  // scales the SGD step (the same as scaling every gradient): the tests' controls
  // How many times a parameter's squared gradient counts in the norm (default once): a control for norms.
  std::function<double(const std::string& name)> norm_weight;
  int64_t sft_trained = 0;  // > 0: only the last sft_trained positions of each sequence train (sft_targets)
};

// An SFT-like batch: targets -100 but on the last `trained` positions of each sequence (the "response").
inline at::Tensor sft_targets(const at::Tensor& targets, int64_t trained) {
  at::Tensor out = targets.clone();
  if (trained > 0) out.narrow(1, 0, out.size(1) - trained).fill_(-100);
  return out;
}

// Plain LibTorch: the whole GPT in one process, every replica's micro-batches in turn, each loss divided by the
// number of micro-batches in the global batch, then torch::optim::Adam or SGD written out as p - (lr x g) (torch's
// SGD fuses that multiply-add into one rounding where DeepSpeed and we round twice). No code of ours but the model and
// the sampler. Runs on the engines' intra-op thread count: LibTorch's CPU reductions split their sums over threads.
inline Trained train_reference(const deepspeed::models::GPTConfig& cfg, const ReferenceRun& r) {
  if (std::getenv("OMP_NUM_THREADS") == nullptr)
    at::set_num_threads(deepspeed::accelerator::host_threads_per_rank(deepspeed::comm::get_local_world_size()));
  deepspeed::models::GPT model(cfg);
  std::vector<at::Tensor> params = model->parameters();
  torch::optim::Adam adam(params, torch::optim::AdamOptions(r.adam_lr));
  const at::Tensor data = dataset(cfg.vocab_size, cfg.seq_len, r.samples);
  Trained run;
  for (int step = 0; step < r.steps; ++step) {
    adam.zero_grad();
    double total = 0;
    for (int d = 0; d < r.dp; ++d) {
      for (int m = 0; m < r.gas; ++m) {
        auto [x, y] = micro_batch(data, step, d, r.dp, m, r.micro, r.gas, r.data_seed);
        at::Tensor loss = model->forward(x, r.sft_trained > 0 ? sft_targets(y, r.sft_trained) : y);
        total += loss.item<double>();
        (loss / static_cast<double>(r.dp * r.gas)).backward();
      }
    }
    double squares = 0;
    for (const auto& item : model->named_parameters()) {
      const double weight = r.norm_weight ? r.norm_weight(item.key()) : 1.0;
      squares += weight * item.value().grad().to(at::kDouble).pow(2).sum().item<double>();
    }
    run.norms.push_back(std::sqrt(squares));
    if (r.optimizer == "SGD") {
      at::NoGradGuard no_grad;
      for (auto& p : params) p.sub_(p.grad() * (r.sgd_lr * r.lr_factor));
    } else {
      adam.step();
    }
    run.losses.push_back(total / static_cast<double>(r.dp * r.gas));
  }
  run.params = snapshot(*model);
  return run;
}

}  // namespace gpt_training
