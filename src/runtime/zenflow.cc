#include "runtime/zenflow.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "deepspeed/error.h"

namespace deepspeed::runtime {

ZenFlowSchedule ZenFlowSchedule::from_config(const config::ZenFlowConfig& c) {
  ZenFlowSchedule s;
  s.warmup = c.full_warm_up_rounds;
  s.adaptive = !c.update_interval.has_value();
  s.update_interval = c.update_interval.value_or(0);
  if (c.select_strategy == "step") {
    s.select_interval = *c.select_interval;
  } else {
    // "epoch", and "auto" (= every epoch): DeepSpeed counts an epoch in its dataloader's steps and, with none,
    // selects only once; steps_per_epoch stands in for the dataloader here.
    const int64_t epochs = c.select_interval.value_or(1);
    s.select_interval = c.steps_per_epoch ? epochs * *c.steps_per_epoch : 0;
  }
  DS_CHECK_T(ConfigError, s.adaptive || s.select_interval == 0 || s.select_interval >= s.update_interval,
             "zero_optimization.zenflow: the selection interval (", s.select_interval,
             " iterations) must be at least update_interval (", s.update_interval, ")");
  return s;
}

bool ZenFlowSchedule::selects(int64_t i) const {
  if (i < warmup) return false;
  return i == warmup || (select_interval > 0 && i % select_interval == 0);
}

bool ZenFlowSchedule::ends_window(int64_t i) const {
  if (i < warmup) return true;
  if (select_interval > 0 && (i + 1) % select_interval == 0) return true;
  return !adaptive && (i + 1 - warmup) % update_interval == 0;
}

ZenFlow::ZenFlow(const config::ZenFlowConfig& config, std::vector<std::vector<at::Tensor>> groups,
                 const std::vector<std::vector<std::string>>& names, ZenFlowAdam adam, comm::ProcessGroup group)
    : schedule_(ZenFlowSchedule::from_config(config)),
      topk_ratio_(config.topk_ratio),
      adam_(std::move(adam)),
      group_(std::move(group)),
      auto_ratio_(config.auto_ratio) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const at::Tensor& p = groups[g][i];
      DS_CHECK_T(ConfigError, p.dim() <= 2, "zero_optimization.zenflow: selects columns of 2-D weights (and all of "
                 "1-D parameters); '", names.at(g).at(i), "' has ", p.dim(), " dimensions");
      Slot s;
      s.group = g;
      s.param = p;
      s.matrix = p.dim() == 2;
      slots_.push_back(std::move(s));
    }
  }
  for (size_t k = 0; k < slots_.size(); ++k) {
    // A tensor hook sees this backward's gradient of the parameter before it is accumulated (and before the
    // stage's reduction hooks, which run after accumulation).
    slots_[k].hook = static_cast<int64_t>(
        slots_[k].param.register_hook([this, k](const at::Tensor& grad) { capture(k, grad); }));
  }
}

ZenFlow::~ZenFlow() {
  for (auto& s : slots_)
    if (s.hook >= 0) s.param.remove_hook(static_cast<unsigned>(s.hook));
}

void ZenFlow::begin_backward(int64_t iteration) {
  armed_ = schedule_.selective(iteration);
  // Nothing selected yet past the warm-up (a resume at a shorter warm-up): this iteration selects.
  whole_ = schedule_.selects(iteration) || (armed_ && !selected_);
  // What a backward captured adds to what an earlier one of the same iteration did; reduce_gradients() clears it.
}

void ZenFlow::reset() {
  for (auto& s : slots_) {
    s.captured = s.grad = s.index = s.value = s.exp_avg = s.exp_avg_sq = at::Tensor();
    s.steps = 0;
  }
  armed_ = whole_ = selected_ = false;
  resume_at(0);
}

bool ZenFlow::ends_window(int64_t i) const {
  return schedule_.ends_window(i) || (schedule_.adaptive && i >= schedule_.warmup && end_next_);
}

bool ZenFlow::starts_window(int64_t i) const {
  if (i == 0) return true;
  return schedule_.adaptive ? window_begin_ == i : schedule_.ends_window(i - 1);
}

int64_t ZenFlow::step_gradient_divisor(int64_t i) const {
  return schedule_.adaptive ? i - window_begin_ + 1 : 1;
}

void ZenFlow::resume_at(int64_t iteration) {
  window_begin_ = iteration;
  window_weighed_ = 0;
  end_next_ = weighed_ = false;
  for (auto& s : slots_) {
    s.local_total = s.local_selected = at::Tensor();
    s.selected_mean = s.unselected_sum = 0.0;
  }
}

void ZenFlow::end_iteration(int64_t i) {
  if (!schedule_.adaptive) return;
  if (ends_window(i)) {
    resume_at(i + 1);  // this iteration's gradients went into the step that closed the window
    return;
  }
  if (!weighed_) return;
  weighed_ = false;
  // Per weight: the unselected columns' mass added up over the window against the selected columns' mean mass per
  // iteration, each per share of the columns (DeepSpeed's auto rule; it divides the running mean by 10 * topk_ratio
  // at every iteration, which is this rule at its default ratio 0.1 and compounds at any other).
  const double n = static_cast<double>(++window_weighed_);
  int64_t matrices = 0, caught_up = 0;
  for (auto& s : slots_) {
    if (!s.matrix) continue;
    ++matrices;
    s.selected_mean += (s.selected / topk_ratio_ - s.selected_mean) / n;
    s.unselected_sum += (s.total - s.selected) / (1.0 - topk_ratio_);
    if (s.unselected_sum >= s.selected_mean) ++caught_up;
  }
  end_next_ = caught_up >= static_cast<int64_t>(auto_ratio_ * static_cast<double>(matrices));
}

void ZenFlow::capture(size_t k, const at::Tensor& grad) {
  if (!armed_) return;
  Slot& s = slots_[k];
  at::Tensor part = (s.matrix && !whole_) ? grad.index_select(1, s.index) : grad;
  if (schedule_.adaptive && s.matrix && !whole_) {
    // The masses the adaptive window weighs (a selection iteration takes them from the averaged whole gradient).
    at::Tensor total = grad.abs().sum(at::kDouble), selected = part.abs().sum(at::kDouble);
    s.local_total = s.local_total.defined() ? s.local_total + total : total;
    s.local_selected = s.local_selected.defined() ? s.local_selected + selected : selected;
  }
  part = part.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  if (s.captured.defined())
    s.captured.add_(part);
  else
    s.captured = std::move(part);
}

void ZenFlow::reduce_gradients() {
  // One flat all-reduce of every captured gradient: whole ones at a selection iteration, else the selected values.
  std::vector<at::Tensor> flat;
  for (auto& s : slots_) {
    if (!s.captured.defined()) {  // unused in this backward: a zero gradient
      const std::vector<int64_t> shape = (s.matrix && !whole_)
          ? std::vector<int64_t>{s.param.size(0), s.index.numel()} : s.param.sizes().vec();
      s.captured = at::zeros(shape, s.param.options().dtype(at::kFloat));
    }
    flat.push_back(s.captured.reshape(-1));
  }
  // Adaptive windows: each matrix's local masses ride along (their rank means come back).
  const bool masses = schedule_.adaptive && !whole_;
  int64_t mass_values = 0;
  if (masses) {
    std::vector<at::Tensor> local;
    for (auto& s : slots_) {
      if (!s.matrix) continue;
      const at::Tensor zero = at::zeros({}, s.param.options().dtype(at::kDouble));
      local.push_back(s.local_total.defined() ? s.local_total : zero);
      local.push_back(s.local_selected.defined() ? s.local_selected : zero);
      s.local_total = s.local_selected = at::Tensor();
    }
    mass_values = static_cast<int64_t>(local.size());
    if (!local.empty()) flat.push_back(at::stack(local).to(at::kFloat));
  }
  at::Tensor buffer = at::cat(flat);
  if (group_.is_member() && group_.size() > 1) {
    group_.all_reduce(buffer, comm::ReduceOp::kSum);
    buffer.div_(static_cast<double>(group_.size()));
  }
  int64_t offset = 0;
  for (auto& s : slots_) {
    const int64_t n = s.captured.numel();
    s.grad = buffer.narrow(0, offset, n).view(s.captured.sizes());
    offset += n;
    s.captured = at::Tensor();
  }
  if (masses) {
    const at::Tensor tail = buffer.narrow(0, offset, mass_values).to(at::kCPU, at::kDouble);
    const double* m = tail.const_data_ptr<double>();
    for (auto& s : slots_) {
      if (!s.matrix) continue;
      s.total = m[0];
      s.selected = m[1];
      m += 2;
    }
    weighed_ = true;
  }
  armed_ = false;
}

void ZenFlow::select() {
  DS_ASSERT(whole_, "ZenFlow::select outside a selection iteration");
  for (auto& s : slots_) {
    if (s.matrix) {
      // A column's importance: the sum of |gradient| over it (DeepSpeed's top-k over the weight's input channels).
      const int64_t columns = s.param.size(1);
      const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(columns) * topk_ratio_));
      const at::Tensor importance = s.grad.abs().sum(0);
      s.index = std::get<0>(std::get<1>(importance.topk(k)).sort());
      if (schedule_.adaptive) {
        s.total = importance.sum(at::kDouble).item<double>();
        s.selected = importance.index_select(0, s.index).sum(at::kDouble).item<double>();
      }
      s.grad = s.grad.index_select(1, s.index);
      s.value = s.param.detach().index_select(1, s.index).to(at::kFloat);
    } else {
      s.value = s.param.detach().to(at::kFloat, false, /*copy=*/true);
    }
    s.exp_avg = at::zeros_like(s.value);
    s.exp_avg_sq = at::zeros_like(s.value);
  }
  selected_ = true;
  weighed_ = schedule_.adaptive;
}

void ZenFlow::write_selected_into_parameters() const {
  if (!selected_) return;
  at::NoGradGuard no_grad;
  for (const auto& s : slots_) {
    at::Tensor p = s.param.detach();
    if (s.matrix)
      p.index_copy_(1, s.index, s.value.to(p.scalar_type()));
    else
      p.copy_(s.value.view(p.sizes()));
  }
}

void ZenFlow::write_selected_into_masters(const std::vector<at::Tensor>& masters,
                                          const std::vector<zero::MasterFragment>& fragments) const {
  if (!selected_) return;
  // Slot of (group, index in group): slots_ follow the groups' order.
  std::vector<size_t> first(masters.size() + 1, slots_.size());
  for (size_t k = slots_.size(); k-- > 0;) first[slots_[k].group] = k;
  for (const auto& f : fragments) {
    const Slot& s = slots_.at(first.at(f.group) + f.index);
    // The whole parameter as the masters hold it, with the selected values put in; then its fragment.
    at::Tensor full = s.param.detach().to(at::kFloat, false, /*copy=*/true);
    at::Tensor mask = at::zeros(full.sizes(), full.options().dtype(at::kBool));
    if (s.matrix) {
      full.index_copy_(1, s.index, s.value);
      mask.index_fill_(1, s.index, true);
    } else {
      full.copy_(s.value.view(full.sizes()));
      mask.fill_(true);
    }
    at::Tensor dst = masters.at(f.group).narrow(0, f.offset, f.end - f.begin);
    const at::Tensor src = full.reshape(-1).narrow(0, f.begin, f.end - f.begin).to(dst.device());
    const at::Tensor keep = mask.reshape(-1).narrow(0, f.begin, f.end - f.begin).to(dst.device());
    dst.copy_(at::where(keep, src, dst));
  }
}

void ZenFlow::step(const std::vector<double>& lrs) {
  at::NoGradGuard no_grad;
  for (auto& s : slots_) {
    // torch's AdamW (single-tensor form) on the fp32 selected values; its step count goes on across selections, as
    // DeepSpeed's selective optimizer's does (only the moments are cleared).
    const double lr = lrs.at(s.group);
    const double decay = adam_.weight_decay.at(s.group);
    ++s.steps;
    at::Tensor grad = s.grad;
    if (adam_.adamw)
      s.value.mul_(1.0 - lr * decay);
    else if (decay != 0.0)
      grad = grad.add(s.value, decay);
    s.exp_avg.lerp_(grad, 1.0 - adam_.beta1);
    s.exp_avg_sq.mul_(adam_.beta2).addcmul_(grad, grad, 1.0 - adam_.beta2);
    const double correction1 = 1.0 - std::pow(adam_.beta1, static_cast<double>(s.steps));
    const double correction2_sqrt = std::sqrt(1.0 - std::pow(adam_.beta2, static_cast<double>(s.steps)));
    const at::Tensor denom = (s.exp_avg_sq.sqrt() / correction2_sqrt).add_(adam_.eps);
    s.value.addcdiv_(s.exp_avg, denom, -lr / correction1);
    s.grad = at::Tensor();
  }
  write_selected_into_parameters();
}

c10::impl::GenericDict ZenFlow::state_dict() const {
  c10::impl::GenericDict out = checkpoint::make_any_dict();
  out.insert("selected", selected_);
  c10::impl::GenericList slots = checkpoint::make_any_list();
  for (const auto& s : slots_) {
    c10::impl::GenericDict d = checkpoint::make_any_dict();
    d.insert("steps", s.steps);
    if (selected_) {
      if (s.matrix) d.insert("index", s.index.cpu());
      d.insert("value", s.value.cpu());
      d.insert("exp_avg", s.exp_avg.cpu());
      d.insert("exp_avg_sq", s.exp_avg_sq.cpu());
    }
    slots.push_back(d);
  }
  out.insert("slots", slots);
  return out;
}

void ZenFlow::load_state_dict(const c10::impl::GenericDict& state, const std::string& where,
                              const std::vector<std::vector<std::string>>& names, bool apply) {
  auto fail = [&](const std::string& what) {
    throw checkpoint::CheckpointError(where + ": zenflow: " + what);
  };
  if (!state.contains("selected") || !state.contains("slots")) fail("expected 'selected' and 'slots'");
  const bool selected = state.at("selected").toBool();
  const c10::impl::GenericList slots = state.at("slots").toList();
  if (slots.size() != slots_.size())
    fail("holds " + std::to_string(slots.size()) + " parameters, this model has " + std::to_string(slots_.size()));
  std::vector<Slot> next = slots_;
  size_t g = 0, i = 0;
  for (size_t k = 0; k < slots_.size(); ++k, ++i) {
    while (i >= names.at(g).size()) ++g, i = 0;
    const std::string name = names[g][i];
    const c10::impl::GenericDict d = slots.get(k).toGenericDict();
    Slot& s = next[k];
    s.steps = d.at("steps").toInt();
    if (!selected) continue;
    const c10::Device device = s.param.device();
    if (s.matrix) {
      s.index = d.at("index").toTensor().to(device);
      if (s.index.dim() != 1 || s.index.scalar_type() != at::kLong || s.index.numel() < 1 ||
          s.index.min().item<int64_t>() < 0 || s.index.max().item<int64_t>() >= s.param.size(1))
        fail("'" + name + "': the selected columns do not fit its " + std::to_string(s.param.size(1)) + " columns");
    }
    const std::vector<int64_t> shape =
        s.matrix ? std::vector<int64_t>{s.param.size(0), s.index.numel()} : s.param.sizes().vec();
    for (const char* key : {"value", "exp_avg", "exp_avg_sq"}) {
      const at::Tensor t = d.at(key).toTensor();
      if (t.sizes().vec() != shape || t.scalar_type() != at::kFloat)
        fail("'" + name + "' " + key + " has shape " + c10::str(t.sizes()) + ", expected fp32 " +
             c10::str(at::IntArrayRef(shape)));
    }
    s.value = d.at("value").toTensor().to(device, at::kFloat, false, /*copy=*/true);
    s.exp_avg = d.at("exp_avg").toTensor().to(device, at::kFloat, false, /*copy=*/true);
    s.exp_avg_sq = d.at("exp_avg_sq").toTensor().to(device, at::kFloat, false, /*copy=*/true);
  }
  if (!apply) return;
  for (size_t k = 0; k < slots_.size(); ++k) {
    slots_[k].steps = next[k].steps;
    slots_[k].index = next[k].index;
    slots_[k].value = next[k].value;
    slots_[k].exp_avg = next[k].exp_avg;
    slots_[k].exp_avg_sq = next[k].exp_avg_sq;
  }
  selected_ = selected;
}

}  // namespace deepspeed::runtime
