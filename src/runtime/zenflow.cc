#include "runtime/zenflow.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "config/feature_gate.h"
#include "deepspeed/error.h"

namespace deepspeed::runtime {

ZenFlowSchedule ZenFlowSchedule::from_config(const config::ZenFlowConfig& c) {
  ZenFlowSchedule s;
  s.warmup = c.full_warm_up_rounds;
  s.adaptive = !c.update_interval.has_value();
  s.update_interval = c.update_interval.value_or(0);
  s.select_interval = config::zenflow_select_iterations(c);
  if (const std::string why = config::zenflow_schedule_problem(c); !why.empty()) throw ConfigError(why);
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
                 const std::vector<std::vector<std::string>>& names, ZenFlowAdam adam, comm::ProcessGroup group,
                 ZenFlowPartitioned partitioned)
    : schedule_(ZenFlowSchedule::from_config(config)),
      topk_ratio_(config.topk_ratio),
      adam_(std::move(adam)),
      group_(std::move(group)),
      partitioned_(std::move(partitioned)),
      auto_ratio_(config.auto_ratio) {
  for (size_t g = 0; g < groups.size(); ++g) {
    first_slot_.push_back(slots_.size());
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const at::Tensor& p = groups[g][i];
      Slot s;
      s.group = g;
      s.param = p;
      s.shape = partitioned_.stage ? partitioned_.shapes.at(g).at(i) : p.sizes().vec();
      DS_CHECK_T(ConfigError, s.shape.size() <= 2, "zero_optimization.zenflow: selects columns of 2-D weights (and "
                 "all of 1-D parameters); '", names.at(g).at(i), "' has ", s.shape.size(), " dimensions");
      s.matrix = s.shape.size() == 2;
      slots_.push_back(std::move(s));
    }
  }
  if (partitioned_.stage) fragments_ = partitioned_.stage->master_fragments();
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
    s.grad = s.index = s.value = s.exp_avg = s.exp_avg_sq = at::Tensor();
    s.steps = 0;
  }
  whole_ = selected_ = false;
  fragment_picks_.clear();
  resume_at(0);  // and what an iteration in progress held
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
  end_next_ = weighed_ = armed_ = false;
  // Nothing of an iteration in progress survives (a load between a backward and its step).
  for (auto& s : slots_) {
    s.captured = s.local_total = s.local_selected = s.chosen_index = s.chosen_grad = at::Tensor();
    s.chosen = false;
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

size_t ZenFlow::slot_of(size_t group, size_t index) const { return first_slot_.at(group) + index; }

void ZenFlow::capture(size_t k, const at::Tensor& grad) {
  if (!armed_) return;
  Slot& s = slots_[k];
  if (partitioned_.stage && whole_) {
    // Stage 3 keeps nothing whole: this parameter's gradient is averaged here, while its unit is gathered, and only
    // its selected columns are kept. (The averaged sum of two backwards would need the whole gradient kept.)
    DS_CHECK(!s.chosen, "zero_optimization.zenflow at stage 3: one backward per selection iteration (iteration's "
             "second backward reached it again)");
    at::Tensor averaged = grad.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    if (group_.is_member() && group_.size() > 1) {
      group_.all_reduce(averaged, comm::ReduceOp::kSum);
      averaged.div_(static_cast<double>(group_.size()));
    }
    choose(s, averaged);
    s.chosen = true;
    return;
  }
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
  if (partitioned_.stage && whole_) {
    // Stage 3's selection iteration: each hook averaged and chose already; a parameter no backward reached has a
    // zero gradient (on every rank alike: the graphs agree).
    for (auto& s : slots_) {
      if (!s.chosen) choose(s, at::zeros(s.shape, s.param.options().dtype(at::kFloat)));
      s.chosen = false;
    }
    weighed_ = schedule_.adaptive;
    armed_ = false;
    return;
  }
  // One flat all-reduce of every captured gradient: whole ones at a selection iteration, else the selected values.
  std::vector<at::Tensor> flat;
  for (auto& s : slots_) {
    if (!s.captured.defined()) {  // unused in this backward: a zero gradient
      const std::vector<int64_t> shape =
          (s.matrix && !whole_) ? std::vector<int64_t>{s.shape[0], s.index.numel()} : s.shape;
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

void ZenFlow::choose(Slot& s, const at::Tensor& grad) {
  if (!s.matrix) {
    s.chosen_grad = grad;
    return;
  }
  // A column's importance: the sum of |gradient| over it (DeepSpeed's top-k over the weight's input channels).
  const int64_t columns = s.shape[1];
  const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(columns) * topk_ratio_));
  const at::Tensor importance = grad.abs().sum(0);
  s.chosen_index = std::get<0>(std::get<1>(importance.topk(k)).sort());
  if (schedule_.adaptive) {
    s.total = importance.sum(at::kDouble).item<double>();
    s.selected = importance.index_select(0, s.chosen_index).sum(at::kDouble).item<double>();
  }
  s.chosen_grad = grad.index_select(1, s.chosen_index);
}

void ZenFlow::select() {
  DS_ASSERT(whole_, "ZenFlow::select outside a selection iteration");
  // Stage 3's hooks chose already; the previous selection kept its columns until now (the engine wrote its values
  // into the masters with them).
  if (!partitioned_.stage) {
    for (auto& s : slots_) choose(s, s.grad);
    weighed_ = schedule_.adaptive;
  }
  for (auto& s : slots_) {
    s.index = std::move(s.chosen_index);
    s.grad = std::move(s.chosen_grad);
    s.chosen_index = s.chosen_grad = at::Tensor();
  }
  if (partitioned_.stage) {
    refresh_fragment_picks();  // the new selection's positions, which the read below uses too
    read_selected_from_masters();
  } else {
    for (auto& s : slots_)
      s.value = s.matrix ? s.param.detach().index_select(1, s.index).to(at::kFloat)
                         : s.param.detach().to(at::kFloat, false, /*copy=*/true);
  }
  for (auto& s : slots_) {
    s.exp_avg = at::zeros_like(s.value);
    s.exp_avg_sq = at::zeros_like(s.value);
  }
  selected_ = true;
}

std::pair<at::Tensor, at::Tensor> ZenFlow::picks(const Slot& s, int64_t begin, int64_t end) const {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(s.param.device());
  if (!s.matrix) {
    const at::Tensor all = at::arange(begin, end, opts);
    return {all - begin, all};
  }
  // Row r, selected column j sits at r * columns + index[j] in the flattening and at r * k + j in the selection.
  const int64_t columns = s.shape[1], k = s.index.numel();
  const at::Tensor rows = at::arange(begin / columns, (end - 1) / columns + 1, opts).unsqueeze(1);
  const at::Tensor position = (rows * columns + s.index.to(opts.device()).unsqueeze(0)).reshape(-1);
  const at::Tensor in_selection = (rows * k + at::arange(k, opts).unsqueeze(0)).reshape(-1);
  const at::Tensor inside = position.ge(begin).logical_and(position.lt(end));
  return {position.masked_select(inside) - begin, in_selection.masked_select(inside)};
}

void ZenFlow::refresh_fragment_picks() {
  fragment_picks_.clear();
  if (!partitioned_.stage) return;
  for (const auto& f : fragments_) fragment_picks_.push_back(picks(slots_[slot_of(f.group, f.index)], f.begin, f.end));
}

void ZenFlow::read_selected_from_masters() {
  const std::vector<at::Tensor>& masters = partitioned_.stage->masters();
  std::vector<at::Tensor> values;
  for (auto& s : slots_) {
    const std::vector<int64_t> shape = s.matrix ? std::vector<int64_t>{s.shape[0], s.index.numel()} : s.shape;
    values.push_back(at::zeros(shape, s.param.options().dtype(at::kFloat)));
  }
  for (size_t i = 0; i < fragments_.size(); ++i) {
    const zero::MasterFragment& f = fragments_[i];
    const size_t k = slot_of(f.group, f.index);
    const auto& [in_fragment, in_selection] = fragment_picks_.at(i);
    const at::Tensor held = masters.at(f.group).narrow(0, f.offset, f.end - f.begin);
    values[k].view(-1).index_copy_(
        0, in_selection, held.index_select(0, in_fragment.to(held.device())).to(values[k].device()));
  }
  // Every selected element lives in exactly one rank's partition: the sum is the whole selection.
  std::vector<at::Tensor> flat;
  for (const auto& v : values) flat.push_back(v.reshape(-1));
  at::Tensor buffer = at::cat(flat);
  if (group_.is_member() && group_.size() > 1) group_.all_reduce(buffer, comm::ReduceOp::kSum);
  // As the parameters hold them (stages 1 and 2 read the parameters): a 16-bit model's partitions are the masters
  // rounded, the selective update's fp32 values included.
  int64_t offset = 0;
  for (size_t k = 0; k < slots_.size(); ++k) {
    const at::ScalarType dtype = slots_[k].param.scalar_type();
    slots_[k].value = buffer.narrow(0, offset, values[k].numel()).view(values[k].sizes()).to(dtype).to(at::kFloat);
    if (dtype == at::kFloat) slots_[k].value = slots_[k].value.clone();
    offset += values[k].numel();
  }
}

void ZenFlow::write_selected_into_parameters() const {
  if (!selected_) return;
  at::NoGradGuard no_grad;
  if (partitioned_.stage) {
    // Into this rank's model-dtype partitions; the next gather of each unit sends them.
    for (size_t i = 0; i < fragments_.size(); ++i) {
      const zero::MasterFragment& f = fragments_[i];
      const auto& [in_fragment, in_selection] = fragment_picks_.at(i);
      partitioned_.writes->write_partition_values(f.group, in_fragment + f.offset,
                                                 slots_[slot_of(f.group, f.index)].value.reshape(-1).index_select(
                                                     0, in_selection));
    }
    partitioned_.writes->finish_partition_writes();
    return;
  }
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
  at::NoGradGuard no_grad;
  for (const auto& f : fragments) {
    const Slot& s = slots_.at(slot_of(f.group, f.index));
    auto [in_fragment, in_selection] = picks(s, f.begin, f.end);
    at::Tensor dst = masters.at(f.group).narrow(0, f.offset, f.end - f.begin);
    dst.index_copy_(0, in_fragment.to(dst.device()),
                    s.value.reshape(-1).index_select(0, in_selection).to(dst.device(), dst.scalar_type()));
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
          s.index.min().item<int64_t>() < 0 || s.index.max().item<int64_t>() >= s.shape[1])
        fail("'" + name + "': the selected columns do not fit its " + std::to_string(s.shape[1]) + " columns");
    }
    const std::vector<int64_t> shape =
        s.matrix ? std::vector<int64_t>{s.shape[0], s.index.numel()} : s.shape;
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
  if (selected_)
    refresh_fragment_picks();
  else
    fragment_picks_.clear();
}

}  // namespace deepspeed::runtime
