// See deepspeed/sequence/tiling.h. Two custom autograd functions: TiledCompute recomputes each tile in backward;
// TiledLoss differentiates each tile in forward (nothing follows a loss but the scaling by its incoming gradient).
// Both take the gradients of the weights from torch::autograd::grad and return them as their own, so autograd
// accumulates each weight's gradient once.
#include "deepspeed/sequence/tiling.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>
#include <string>

namespace deepspeed::sequence {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_tile(int64_t tile_tokens) {
  if (tile_tokens < 1)
    throw std::invalid_argument("sequence tiling: tile_tokens must be >= 1, got " + std::to_string(tile_tokens));
}

// The weights among `params` that take a gradient.
std::vector<at::Tensor> trained(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params)
    if (p.defined() && p.requires_grad()) out.push_back(p);
  return out;
}

// One tile of rows [first, first + n) of `rows` [rows, features], detached, taking a gradient when `grad`.
at::Tensor tile_of(const at::Tensor& rows, int64_t first, int64_t n, bool grad) {
  return rows.narrow(0, first, n).detach().requires_grad_(grad);
}

// Backpropagates `root` (with `root_grad`) to the tile `x` (when it takes a gradient) and `weights`; writes the
// tile's gradient into `x_grad` rows and adds the weights' into `weight_grads` (empty: the first tile's).
void differentiate(const at::Tensor& root, const at::Tensor& root_grad, const at::Tensor& x,
                   const std::vector<at::Tensor>& weights, at::Tensor x_grad_rows,
                   std::vector<at::Tensor>& weight_grads) {
  variable_list inputs;
  if (x.requires_grad()) inputs.push_back(x);
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  if (inputs.empty() || !root.requires_grad()) return;
  const variable_list grads = torch::autograd::grad({root}, inputs, {root_grad}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
  size_t i = 0;
  if (x.requires_grad()) {
    if (grads[0].defined()) x_grad_rows.copy_(grads[0]);
    i = 1;
  }
  const bool first = weight_grads.empty();
  if (first) weight_grads.resize(weights.size());
  for (size_t w = 0; w < weights.size(); ++w, ++i) {
    if (!grads[i].defined()) continue;
    if (weight_grads[w].defined()) {
      weight_grads[w].add_(grads[i]);
    } else {
      weight_grads[w] = grads[i].clone();
    }
  }
}

// fn over x's rows in tiles, joined and shaped as x with fn's feature count.
at::Tensor run_tiles(const TileFn& fn, const at::Tensor& x, int64_t tile) {
  const at::Tensor rows = x.reshape({-1, x.size(-1)});
  std::vector<at::Tensor> outs;
  for (int64_t first = 0; first < rows.size(0); first += tile)
    outs.push_back(fn(rows.narrow(0, first, std::min(tile, rows.size(0) - first))));
  const at::Tensor y = at::cat(outs, 0);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(y.size(-1));
  return y.reshape(shape);
}

struct TileState : torch::CustomClassHolder {
  TileFn fn;
  int64_t tile = 1;
  size_t num_weights = 0;
};

class TiledCompute : public torch::autograd::Function<TiledCompute> {
 public:
  // inputs: x, then the weights.
  static variable_list forward(AutogradContext* ctx, const c10::intrusive_ptr<TileState>& state,
                               at::TensorList inputs) {
    const at::Tensor& x = inputs[0];
    at::Tensor y;
    {
      at::NoGradGuard no_grad;
      y = run_tiles(state->fn, x, state->tile);
    }
    ctx->save_for_backward({x});
    ctx->saved_data["state"] = at::IValue::make_capsule(state);
    ctx->saved_data["x_grad"] = x.requires_grad();
    // The weights by reference, not as saved variables: ZeRO-3 gathers them again for backward, which a saved
    // variable's version check would take for an in-place change.
    for (size_t w = 0; w < state->num_weights; ++w) ctx->saved_data["w" + std::to_string(w)] = inputs[1 + w];
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<TileState>(ctx->saved_data["state"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const bool x_grad_wanted = ctx->saved_data["x_grad"].toBool();
    const at::Tensor rows = x.reshape({-1, x.size(-1)});
    const at::Tensor g = grad_outputs[0].reshape({rows.size(0), -1});
    std::vector<at::Tensor> weights;
    for (size_t w = 0; w < state->num_weights; ++w) weights.push_back(saved_weight(ctx, w));
    at::Tensor x_grad = x_grad_wanted ? at::zeros_like(rows) : at::Tensor();
    std::vector<at::Tensor> weight_grads;
    for (int64_t first = 0; first < rows.size(0); first += state->tile) {
      const int64_t n = std::min(state->tile, rows.size(0) - first);
      const at::Tensor t = tile_of(rows, first, n, x_grad_wanted);
      at::Tensor out;
      {
        at::AutoGradMode grad_on(true);
        out = state->fn(t);
      }
      differentiate(out, g.narrow(0, first, n), t, weights, x_grad_wanted ? x_grad.narrow(0, first, n) : at::Tensor(),
                    weight_grads);
    }
    variable_list result;
    result.emplace_back();  // the state
    result.push_back(x_grad_wanted ? x_grad.reshape(x.sizes()) : at::Tensor());
    weight_grads.resize(state->num_weights);
    for (auto& w : weight_grads) result.push_back(w);
    return result;
  }

 private:
  // The weights are inputs 1.. of the function; autograd keeps them alive (they are leaves of the model).
  static at::Tensor saved_weight(AutogradContext* ctx, size_t w) {
    return ctx->saved_data["w" + std::to_string(w)].toTensor();
  }
};

class TiledLoss : public torch::autograd::Function<TiledLoss> {
 public:
  // inputs: hidden, targets, then the weights.
  static variable_list forward(AutogradContext* ctx, const c10::intrusive_ptr<TileState>& state,
                               at::TensorList inputs) {
    const at::Tensor& hidden = inputs[0];
    const at::Tensor rows = hidden.reshape({-1, hidden.size(-1)});
    const at::Tensor targets = inputs[1].reshape({-1});
    const bool x_grad_wanted = hidden.requires_grad();
    const std::vector<at::Tensor> weights(inputs.begin() + 2, inputs.end());
    at::Tensor x_grad = x_grad_wanted ? at::zeros_like(rows) : at::Tensor();
    std::vector<at::Tensor> weight_grads;
    at::Tensor total = at::zeros({}, rows.options().dtype(at::kFloat));
    const at::Tensor one = at::ones({}, total.options());
    for (int64_t first = 0; first < rows.size(0); first += state->tile) {
      const int64_t n = std::min(state->tile, rows.size(0) - first);
      const at::Tensor t = tile_of(rows, first, n, x_grad_wanted);
      at::Tensor loss;
      {
        // A graph only when something takes a gradient (not in evaluation: no weights, no hidden gradient).
        at::AutoGradMode grad_on(x_grad_wanted || !weights.empty());
        loss = cross_entropy_sum(state->fn(t), targets.narrow(0, first, n));
      }
      differentiate(loss, one, t, weights, x_grad_wanted ? x_grad.narrow(0, first, n) : at::Tensor(), weight_grads);
      total += loss.detach();
    }
    weight_grads.resize(weights.size());
    variable_list keep{x_grad_wanted ? x_grad.reshape(hidden.sizes()) : at::Tensor()};
    keep.insert(keep.end(), weight_grads.begin(), weight_grads.end());
    ctx->save_for_backward(keep);
    return {total};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list kept = ctx->get_saved_variables();
    const at::Tensor& g = grad_outputs[0];
    variable_list result;
    result.emplace_back();  // the state
    result.push_back(kept[0].defined() ? kept[0] * g.to(kept[0].scalar_type()) : at::Tensor());
    result.emplace_back();  // the targets
    for (size_t w = 1; w < kept.size(); ++w)
      result.push_back(kept[w].defined() ? kept[w] * g.to(kept[w].scalar_type()) : at::Tensor());
    return result;
  }

  static at::Tensor cross_entropy_sum(const at::Tensor& logits, const at::Tensor& targets) {
    return at::cross_entropy_loss(logits.to(at::kFloat), targets, /*weight=*/{}, at::Reduction::Sum,
                                  /*ignore_index=*/-100);
  }
};

}  // namespace

at::Tensor tiled_compute(const TileFn& fn, const at::Tensor& x, const std::vector<at::Tensor>& params,
                         int64_t tile_tokens) {
  check_tile(tile_tokens);
  const std::vector<at::Tensor> weights = trained(params);
  auto state = c10::make_intrusive<TileState>();
  state->fn = fn;
  state->tile = tile_tokens;
  state->num_weights = weights.size();
  if (!at::GradMode::is_enabled() || (!x.requires_grad() && weights.empty())) {
    at::NoGradGuard no_grad;
    return run_tiles(fn, x, tile_tokens);
  }
  variable_list inputs{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  return TiledCompute::apply(state, at::TensorList(inputs))[0];
}

at::Tensor tiled_cross_entropy_sum(const TileFn& head, const at::Tensor& hidden, const at::Tensor& targets,
                                   const std::vector<at::Tensor>& params, int64_t tile_tokens) {
  check_tile(tile_tokens);
  if (hidden.numel() / hidden.size(-1) != targets.numel())
    throw std::invalid_argument("tiled_cross_entropy_sum: " + std::to_string(targets.numel()) + " targets for " +
                                std::to_string(hidden.numel() / hidden.size(-1)) + " positions");
  auto state = c10::make_intrusive<TileState>();
  state->fn = head;
  state->tile = tile_tokens;
  const std::vector<at::Tensor> weights = at::GradMode::is_enabled() ? trained(params) : std::vector<at::Tensor>();
  state->num_weights = weights.size();
  variable_list inputs{hidden, targets};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  if (!at::GradMode::is_enabled()) {
    at::NoGradGuard no_grad;
    // The same function without gradients: forward alone (no weights, no hidden gradient).
    return TiledLoss::apply(state, at::TensorList(variable_list{hidden.detach(), targets}))[0];
  }
  return TiledLoss::apply(state, at::TensorList(inputs))[0];
}

}  // namespace deepspeed::sequence
