// zero_optimization.zenflow against a plain LibTorch loop written here from ZenFlow's rule (no code of ours runs in
// it but the model and the sampler):
//   - the first `full_warm_up_rounds` iterations: every parameter takes AdamW's step on fp32 masters;
//   - at a selection iteration (the end of the warm-up, then every `select_interval`): each 2-D weight's top-k columns
//     by sum |gradient| over the column of this iteration's averaged gradient; the values the selective update left
//     in the previous selection go to the masters first; the selective moments restart;
//   - every later iteration: the selected columns and the 1-D parameters take AdamW's step at once on this
//     iteration's gradient; all gradients also add up on the masters' side, which take AdamW's step at the end of
//     each `update_interval` window and go to the model's other columns then (overlapped: at the next window's end,
//     one window stale);
//   - every gradient is the loss's divided by update_interval (DeepSpeed's gradient_accumulation_steps);
//   - update_interval "auto": after each selective iteration, per 2-D weight, the unselected columns' |gradient| mass
//     added up over the window / (1 - topk_ratio) against the selected columns' mean mass / topk_ratio; once
//     auto_ratio of the weights have caught up, the next iteration ends the window; the CPU step takes the window's
//     mean gradient (the loss is not divided).
// A run that ignored the selection, selected other columns, skipped the 1-D parameters, stepped the masters every
// iteration or landed the overlapped step early parts from this reference by far more than the bound (checked).
// Stages 1-3: at stage 3 the selection is made in the hooks and the values go through the partitions (a stage-3 run
// that gave the masters the new selection's columns before the old selection's values measured 0.9 here).
#include <gtest/gtest.h>

#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "runtime/zenflow.h"
#include "tiny_gpt.h"
#include "tolerance.h"

namespace {

constexpr int kIterations = 10;
constexpr int64_t kMicro = 2;
constexpr double kLr = 0.003, kDecay = 0.1, kRatio = 0.25, kAutoRatio = 0.99;

struct Rule {
  int64_t warmup = 1, update_interval = 2, select_interval = 4;
  bool overlap = false;
  bool selective = true;  // false: the same windows with no selective update (the comparison's foil)
  double eps = 1e-8;      // Adam's; a large one makes the update scale with the gradient
  double grad_scale = 1;  // the reference's gradients times this (a foil for a wrong averaging)
  bool adaptive = false;  // update_interval "auto"
  double auto_ratio = 0.99;
  bool window_sum = false;  // adaptive foil: the CPU step on the window's sum instead of its mean
  // The windows to use instead of deciding them (the engine's, where its masses are rank means of local sums).
  std::vector<char> given_ends;
  std::shared_ptr<std::vector<char>> decided;  // out: whether each iteration ended a window
  bool ends_window(int64_t i) const {
    return i < warmup || (i + 1 - warmup) % update_interval == 0 || (i + 1) % select_interval == 0;
  }
  bool selects(int64_t i) const { return i == warmup || (i > warmup && i % select_interval == 0); }
};

struct AdamState {
  at::Tensor exp_avg, exp_avg_sq;
  int64_t steps = 0;
};

// torch.optim.AdamW's update, as its documentation writes it, on `value` with `grad`.
void adamw_update(at::Tensor& value, const at::Tensor& grad, AdamState& s, double lr, double eps) {
  const double b1 = 0.9, b2 = 0.999;
  ++s.steps;
  value.mul_(1 - lr * kDecay);
  s.exp_avg.mul_(b1).add_(grad, 1 - b1);
  s.exp_avg_sq.mul_(b2).add_(grad * grad, 1 - b2);
  const double c1 = 1 - std::pow(b1, s.steps), c2 = 1 - std::pow(b2, s.steps);
  value.sub_(lr / c1 * s.exp_avg / (s.exp_avg_sq.sqrt() / std::sqrt(c2) + eps));
}

tiny_gpt::MakeReferenceStep zenflow_reference(Rule rule, std::vector<double> lrs) {
  return [rule, lrs](std::vector<at::Tensor>& params) -> tiny_gpt::ReferenceStep {
    struct State {
      std::vector<at::Tensor> masters, accumulated, index, value;
      std::vector<AdamState> selective;
      std::shared_ptr<torch::optim::AdamW> cpu;
      int64_t iteration = 0;
      bool pending = false, has_selection = false;
      // Adaptive windows.
      int64_t window_begin = 0, weighed = 0;
      bool end_next = false;
      std::vector<double> selected_mean, unselected_sum;
    };
    auto st = std::make_shared<State>();
    for (const auto& p : params) {
      st->masters.push_back(p.detach().clone());
      st->accumulated.push_back(at::zeros_like(p));
    }
    st->cpu = std::make_shared<torch::optim::AdamW>(st->masters, torch::optim::AdamWOptions(kLr).weight_decay(kDecay).eps(rule.eps));
    st->index.resize(params.size());
    st->value.resize(params.size());
    st->selective.resize(params.size());
    st->selected_mean.assign(params.size(), 0.0);
    st->unselected_sum.assign(params.size(), 0.0);
    return [params, rule, lrs, st] {
      at::NoGradGuard no_grad;
      const int64_t i = st->iteration++;
      const double lr = lrs.at(i);
      bool ends = rule.ends_window(i);
      if (rule.adaptive) ends = i < rule.warmup || (i + 1) % rule.select_interval == 0 || st->end_next;
      if (!rule.given_ends.empty()) ends = rule.given_ends.at(i) != 0;
      if (rule.decided) rule.decided->push_back(ends);
      const double divide = rule.adaptive ? 1.0 : static_cast<double>(rule.update_interval);
      std::vector<at::Tensor> grads;
      for (size_t k = 0; k < params.size(); ++k) {
        grads.push_back(params[k].grad() * (rule.grad_scale / divide));
        st->accumulated[k].add_(grads[k]);
      }
      // After the iteration: a window that ended starts afresh; else the adaptive rule weighs this iteration.
      auto weigh = [&] {
        if (!rule.adaptive) return;
        if (ends) {
          st->window_begin = i + 1;
          st->weighed = 0;
          st->end_next = false;
          std::fill(st->selected_mean.begin(), st->selected_mean.end(), 0.0);
          std::fill(st->unselected_sum.begin(), st->unselected_sum.end(), 0.0);
          return;
        }
        const double n = static_cast<double>(++st->weighed);
        int64_t matrices = 0, caught_up = 0;
        for (size_t k = 0; k < params.size(); ++k) {
          if (params[k].dim() != 2) continue;
          ++matrices;
          const double total = grads[k].abs().sum().item<double>();
          const double selected = grads[k].index_select(1, st->index[k]).abs().sum().item<double>();
          st->selected_mean[k] += (selected / kRatio - st->selected_mean[k]) / n;
          st->unselected_sum[k] += (total - selected) / (1 - kRatio);
          if (st->unselected_sum[k] >= st->selected_mean[k]) ++caught_up;
        }
        st->end_next = caught_up >= static_cast<int64_t>(rule.auto_ratio * static_cast<double>(matrices));
      };
      auto land = [&] {
        for (size_t k = 0; k < params.size(); ++k) params[k].copy_(st->masters[k]);
        st->pending = false;
      };
      auto put_selected = [&](std::vector<at::Tensor>& into) {
        for (size_t k = 0; k < params.size(); ++k) {
          if (params[k].dim() == 2)
            into[k].index_copy_(1, st->index[k], st->value[k]);
          else
            into[k].copy_(st->value[k]);
        }
      };
      auto cpu_step = [&] {
        const double length = static_cast<double>(i - st->window_begin + 1);
        const double mean = rule.adaptive && !rule.window_sum ? 1.0 / length : 1.0;
        for (size_t k = 0; k < params.size(); ++k) {
          st->masters[k].mutable_grad() = st->accumulated[k] * mean;
          st->accumulated[k].zero_();
        }
        st->cpu->param_groups()[0].options().set_lr(lr);
        st->cpu->step();
      };
      if (i < rule.warmup || !rule.selective) {
        if (ends) {
          cpu_step();
          land();
        }
        weigh();
        return;
      }
      if (rule.selects(i)) {
        if (st->has_selection) {
          if (st->pending) {
            land();
            std::vector<at::Tensor> p(params.begin(), params.end());
            put_selected(p);
          }
          put_selected(st->masters);
        }
        for (size_t k = 0; k < params.size(); ++k) {
          if (params[k].dim() == 2) {
            const int64_t cols = params[k].size(1);
            const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(cols * kRatio));
            st->index[k] = std::get<0>(std::get<1>(grads[k].abs().sum(0).topk(n)).sort());
            st->value[k] = params[k].index_select(1, st->index[k]);
          } else {
            st->value[k] = params[k].clone();
          }
          st->selective[k].exp_avg = at::zeros_like(st->value[k]);
          st->selective[k].exp_avg_sq = at::zeros_like(st->value[k]);
        }
        st->has_selection = true;
      }
      if (ends) {
        if (rule.overlap && st->pending) land();
        cpu_step();
        if (rule.overlap)
          st->pending = true;
        else
          land();
      }
      for (size_t k = 0; k < params.size(); ++k) {
        const at::Tensor g = params[k].dim() == 2 ? grads[k].index_select(1, st->index[k]) : grads[k];
        adamw_update(st->value[k], g, st->selective[k], lr, rule.eps);
      }
      std::vector<at::Tensor> p(params.begin(), params.end());
      put_selected(p);
      weigh();
    };
  };
}

std::string zenflow_json(const Rule& rule, int stage, const std::string& extra_top = "") {
  return "{\"train_micro_batch_size_per_gpu\": " + std::to_string(kMicro) +
         ", \"steps_per_print\": 1000, \"gradient_clipping\": 0, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": " +
         std::to_string(kLr) + ", \"weight_decay\": " + std::to_string(kDecay) + ", \"eps\": " + c10::str(rule.eps) +
         "}}, \"zero_optimization\": {\"stage\": " + std::to_string(stage) +
         // Stage 3: every block partitioned (the tiny model's tensors are all under the default threshold).
         (stage == 3 ? ", \"stage3_param_persistence_threshold\": 0" : "") +
         ", \"offload_optimizer\": {\"device\": \"cpu\"}, \"zenflow\": {\"topk_ratio\": " + std::to_string(kRatio) +
         ", \"select_strategy\": \"step\", \"select_interval\": " + std::to_string(rule.select_interval) +
         ", \"update_interval\": " +
         (rule.adaptive ? "\"auto\", \"auto_ratio\": " + c10::str(rule.auto_ratio)
                        : std::to_string(rule.update_interval)) +
         ", \"full_warm_up_rounds\": " + std::to_string(rule.warmup) +
         ", \"overlap_step\": " + (rule.overlap ? "true" : "false") + "}}" + extra_top + "}";
}

struct ZenFlowRun {
  std::vector<at::Tensor> params;
  std::vector<double> lrs;
  std::vector<char> ends;  // Engine::is_gradient_accumulation_boundary() before each iteration
};

ZenFlowRun train_zenflow(const Rule& rule, int stage, at::ScalarType dtype = at::kFloat, const std::string& extra = "") {
  tiny_gpt::ensure_comm();
  deepspeed::models::GPTConfig cfg = tiny_gpt::config();
  deepspeed::models::GPT model = tiny_gpt::make_model(cfg);
  const std::string precision = dtype == at::kBFloat16 ? ", \"bf16\": {\"enabled\": true}" : "";
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(zenflow_json(rule, stage, precision + extra)));
  const auto data = tiny_gpt::dataset(cfg);
  ZenFlowRun out;
  for (int i = 0; i < kIterations; ++i) {
    out.lrs.push_back(engine.get_lr().at(0));
    out.ends.push_back(engine.is_gradient_accumulation_boundary());
    tiny_gpt::train(engine, data, 1, i);
  }
  deepspeed::zero::GatheredParameters full(*model);
  out.params = tiny_gpt::snapshot(model);
  return out;
}

tiny_gpt::Reference reference(const Rule& rule, const std::vector<double>& lrs) {
  return tiny_gpt::train_reference(tiny_gpt::config(), deepspeed::comm::get_world_size(), kMicro, 1, kIterations, 0.0,
                                   zenflow_reference(rule, lrs));
}

// Adam turns rounding differences in near-zero gradients into full-size updates, so no closed form holds: measured
// at both SIMD levels (tests/common/tolerance.h) at 1-4 ranks, worst case.
double adam_bound() { return tolerance::measured(7.1e-6, 7.0e-6); }

TEST(ZenFlow, SelectiveAndWindowedUpdatesMatchThePlainLoop) {
  for (bool overlap : {false, true}) {
    for (int stage : {1, 2, 3}) {
      Rule rule;
      rule.overlap = overlap;
      const ZenFlowRun run = train_zenflow(rule, stage);
      const auto ref = reference(rule, run.lrs);
      EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, ref.params), adam_bound())
          << "stage " << stage << (overlap ? " overlapped" : "");
    }
  }
}

// The adaptive tests' runs, measured the same way (worst at 3 ranks).
double adaptive_bound() { return tolerance::measured(9.9e-6, 8.8e-6); }

std::string windows_of(const std::vector<char>& ends) {
  std::string out;
  for (char e : ends) out += e ? '|' : '.';
  return out;
}

// update_interval "auto": the engine ends windows where the rule says and steps on each window's mean. At one rank
// the reference decides the windows from its own gradients (the same masses); at more, the engine's masses are the
// rank means of local |gradient| sums (no extra all-reduce of whole gradients), which the whole-batch reference
// cannot form, so it takes the engine's windows and checks everything else.
TEST(ZenFlow, AdaptiveWindowsMatchThePlainLoop) {
  tiny_gpt::ensure_comm();
  const int world = deepspeed::comm::get_world_size();
  for (bool overlap : {false, true}) {
    for (int stage : {1, 2, 3}) {
      Rule rule;
      rule.adaptive = true;
      rule.overlap = overlap;
      rule.select_interval = 6;
      rule.auto_ratio = kAutoRatio;
      const ZenFlowRun run = train_zenflow(rule, stage);
      Rule ref_rule = rule;
      ref_rule.decided = std::make_shared<std::vector<char>>();
      if (world > 1) ref_rule.given_ends = run.ends;
      const auto ref = reference(ref_rule, run.lrs);
      const std::string label = "stage " + std::to_string(stage) + (overlap ? " overlapped" : "") + ", windows " +
                                windows_of(run.ends);
      EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, ref.params), adaptive_bound()) << label;
      if (world == 1) {
        EXPECT_EQ(windows_of(run.ends), windows_of(*ref_rule.decided));
      }
      // Every rank ends the same windows (else the stages' reductions would not pair up).
      at::Tensor ends = at::tensor(std::vector<double>(run.ends.begin(), run.ends.end()));
      at::Tensor most = ends.clone();
      deepspeed::comm::get_world_group().all_reduce(most, deepspeed::comm::ReduceOp::kMax);
      EXPECT_TRUE(at::equal(ends, most)) << label;
      // The rule ended at least one window the schedule alone would not have (not the warm-up's, not before a
      // selection), and at least one window spans more than two iterations.
      int64_t by_rule = 0, longest = 0, length = 0;
      for (int64_t i = 0; i < kIterations; ++i) {
        ++length;
        if (!run.ends[i]) continue;
        if (i >= rule.warmup && (i + 1) % rule.select_interval != 0) ++by_rule;
        longest = std::max(longest, length);
        length = 0;
      }
      EXPECT_GE(by_rule, 1) << label;
      EXPECT_GE(longest, 3) << label;
    }
  }
}

// The adaptive window's step takes the window's mean gradient (a sum would step the same windows with a larger
// gradient: with eps 0.1 Adam's update scales with it), and its windows are not a fixed update_interval's.
TEST(ZenFlow, AdaptiveWindowsStepOnTheirMeanGradient) {
  tiny_gpt::ensure_comm();
  Rule rule;
  rule.adaptive = true;
  rule.select_interval = 6;
  rule.auto_ratio = kAutoRatio;
  rule.eps = 0.1;
  const ZenFlowRun run = train_zenflow(rule, 2);
  Rule mean = rule;
  mean.given_ends = run.ends;
  const auto ref = reference(mean, run.lrs);
  EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, ref.params), adaptive_bound()) << windows_of(run.ends);
  Rule sum = mean;
  sum.window_sum = true;
  EXPECT_GT(tiny_gpt::max_relative_error(reference(sum, run.lrs).params, ref.params), 20 * adaptive_bound());
  Rule fixed = rule;
  fixed.adaptive = false;
  fixed.update_interval = 2;
  EXPECT_GT(tiny_gpt::max_relative_error(reference(fixed, run.lrs).params, ref.params), 20 * adaptive_bound());
}

// The all-gathers of each step() of `iterations` iterations (comms logger): at stage 3 each re-gathers the persistent
// unit once its update is in the partitions.
std::vector<int64_t> all_gathers_per_step(const std::string& json, int iterations) {
  tiny_gpt::ensure_comm();
  deepspeed::models::GPTConfig cfg = tiny_gpt::config();
  deepspeed::models::GPT model = tiny_gpt::make_model(cfg);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
  const auto data = tiny_gpt::dataset(cfg);
  deepspeed::DataParallelSampler sampler(data.size(0), engine.train_micro_batch_size_per_gpu(), 1,
                                         engine.global_rank(), engine.world_size(), tiny_gpt::kDataSeed);
  deepspeed::comm::CommsLoggerOptions logging;
  logging.enabled = true;
  std::vector<int64_t> out;
  for (int i = 0; i < iterations; ++i) {
    at::Tensor x, y;
    tiny_gpt::split_batch(data, sampler.micro_batch(i, 0), &x, &y);
    engine.backward(engine.forward(x.to(engine.device()), y.to(engine.device())));
    deepspeed::comm::configure_comms_logger(logging);
    deepspeed::comm::reset_comms_logger();
    engine.step();
    int64_t gathers = 0;
    for (const auto& s : deepspeed::comm::comms_stats())
      if (s.op.find("all_gather") != std::string::npos) gathers += s.count;
    deepspeed::comm::configure_comms_logger({});
    out.push_back(gathers);
  }
  return out;
}

// A step's publish and ZenFlow's writes of the selected values over it would each gather stage 3's persistent unit
// again; one gather after both is enough: every ZenFlow step (warm-up, window end or not, overlapped or not) makes as
// many all-gathers as a plain stage-3 step. The tiny GPT's tensors are all under the default persistence threshold.
TEST(ZenFlow, AStageThreeStepGathersThePersistentUnitOnce) {
  tiny_gpt::ensure_comm();
  if (deepspeed::comm::get_world_size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  const auto erase = [](std::string& json, const std::string& what) {
    const size_t at_pos = json.find(what);
    ASSERT_NE(at_pos, std::string::npos) << what;
    json.erase(at_pos, what.size());
  };
  std::string plain = zenflow_json(Rule(), 3);
  erase(plain, ", \"stage3_param_persistence_threshold\": 0");
  erase(plain, plain.substr(plain.find(", \"zenflow\""), plain.find('}', plain.find(", \"zenflow\"")) + 1 -
                                                                   plain.find(", \"zenflow\"")));
  ASSERT_EQ(plain.find("zenflow"), std::string::npos) << plain;
  const std::vector<int64_t> reference = all_gathers_per_step(plain, 1);
  ASSERT_GT(reference.at(0), 0);
  for (bool overlap : {false, true}) {
    Rule rule;
    rule.overlap = overlap;
    std::string json = zenflow_json(rule, 3);
    erase(json, ", \"stage3_param_persistence_threshold\": 0");
    const std::vector<int64_t> steps = all_gathers_per_step(json, kIterations);
    for (int i = 0; i < kIterations; ++i)
      EXPECT_EQ(steps[i], reference[0]) << "iteration " << i << (overlap ? " overlapped" : "");
  }
}

// Stage 3 trains as stage 2 does: at one rank (no reduction order differs) bit for bit, also with bf16 parameters,
// where the selected values' rounding goes into the stage's bf16 partitions instead of the parameters; at more ranks
// within the Adam bound (fp32).
TEST(ZenFlow, StageThreeTrainsAsStageTwo) {
  tiny_gpt::ensure_comm();
  const bool one = deepspeed::comm::get_world_size() == 1;
  for (bool overlap : {false, true}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      if (!one && dtype == at::kBFloat16) continue;  // a bf16 rounding step apart is not a bound
      Rule rule;
      rule.overlap = overlap;
      rule.update_interval = 1;  // stage 2 accumulates bf16 gradients across a window in bf16, stage 3 in fp32
      const ZenFlowRun two = train_zenflow(rule, 2, dtype), three = train_zenflow(rule, 3, dtype);
      const std::string label = std::string(dtype == at::kFloat ? "fp32" : "bf16") + (overlap ? " overlapped" : "");
      if (one) {
        EXPECT_EQ(tiny_gpt::max_relative_error(three.params, two.params), 0.0) << label;
      } else {
        EXPECT_WITHIN(tiny_gpt::max_relative_error(three.params, two.params), adam_bound()) << label;
      }
    }
  }
}

// Adam with the default eps is blind to a constant gradient scale, so the comparison above would pass with the
// selective gradients summed over the ranks instead of averaged. With eps 0.1 (far above these gradients) the update
// is nearly lr times the gradient: a scale of 2 moves the reference by far more than the bound.
TEST(ZenFlow, TheSelectiveGradientIsTheRankAverage) {
  tiny_gpt::ensure_comm();
  // Stage 3 averages in each weight's hook at a selection iteration (stages 1-2 after backward): both are checked.
  for (int stage : {2, 3}) {
    for (bool overlap : {false, true}) {
      Rule rule;
      rule.eps = 0.1;
      rule.overlap = overlap;
      const ZenFlowRun run = train_zenflow(rule, stage);
      EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, reference(rule, run.lrs).params), adam_bound())
          << "stage " << stage << (overlap ? " overlapped" : "");
      Rule doubled = rule;
      doubled.grad_scale = 2;
      EXPECT_GT(tiny_gpt::max_relative_error(reference(doubled, run.lrs).params, reference(rule, run.lrs).params),
                20 * adam_bound());
    }
  }
}

TEST(ZenFlow, TheReferenceRuleIsNotTheWindowedStepAlone) {
  tiny_gpt::ensure_comm();
  Rule rule;
  const std::vector<double> lrs(kIterations, kLr);
  const auto zenflow = reference(rule, lrs);
  Rule windows_only = rule;
  windows_only.selective = false;
  EXPECT_GT(tiny_gpt::max_relative_error(zenflow.params, reference(windows_only, lrs).params), 20 * adam_bound());
  Rule overlapped = rule;
  overlapped.overlap = true;
  EXPECT_GT(tiny_gpt::max_relative_error(zenflow.params, reference(overlapped, lrs).params), 20 * adam_bound());
}

TEST(ZenFlow, TheScheduleMovesEveryIterationAndEachUpdateTakesItsOwn) {
  Rule rule;
  rule.overlap = true;
  const std::string schedule = ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.0005, "
                               "\"warmup_max_lr\": 0.003, \"warmup_num_steps\": 6, \"warmup_type\": \"linear\"}}";
  const ZenFlowRun run = train_zenflow(rule, 2, at::kFloat, schedule);
  // WarmupLR's first two values are both its minimum; from there it rises at every iteration, window end or not
  // (iterations 1 and 5 end none).
  for (int i = 2; i < 6; ++i) EXPECT_GT(run.lrs[i], run.lrs[i - 1]) << "iteration " << i;
  EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, reference(rule, run.lrs).params), adam_bound());
}

// bf16 parameters: the selected values live in fp32 and only their rounding goes into the parameters, so updates
// far below bf16's resolution add up instead of being lost (a bf16 selective state would leave the weight unchanged).
// The columns picked are those with the largest summed |gradient|. No comm: a single-rank ZenFlow with a null group.
TEST(ZenFlow, Bf16ParametersTakeTheRoundingOfFp32SelectedValues) {
  deepspeed::config::ZenFlowConfig c;
  c.update_interval = 1;
  c.topk_ratio = 0.5;
  const at::Tensor start = at::full({2, 4}, 1.0, at::kFloat);
  at::Tensor w = start.to(at::kBFloat16).requires_grad_(true);
  deepspeed::runtime::ZenFlowAdam adam;
  adam.weight_decay = {0.0};
  deepspeed::runtime::ZenFlow zf(c, {{w}}, {{"w"}}, adam, deepspeed::comm::ProcessGroup());
  // Column importance 1, 4, 2, 3 (scaled): columns 1 and 3 are selected.
  const at::Tensor weights = at::tensor({1.0f, 4.0f, 2.0f, 3.0f}).repeat({2, 1});
  const double lr = 1e-4;  // bf16's spacing at 1.0 is 2^-7: a single step does not show in the parameter
  double expected = 1.0;
  for (int64_t it = 0; it < 40; ++it) {
    zf.begin_backward(it);
    (w.to(at::kFloat) * weights).sum().backward();
    zf.reduce_gradients();
    if (zf.schedule().selects(it)) zf.select();
    zf.step({lr});
    expected -= lr;  // Adam's first steps on a constant gradient move by lr each
    w.mutable_grad() = at::Tensor();
  }
  const at::Tensor got = w.detach().to(at::kFloat);
  for (int64_t col : {1, 3}) {
    // Half of bf16's spacing below 1.0 (the rounding), plus 1% of the movement for Adam's eps.
    EXPECT_NEAR(got[0][col].item<double>(), expected, std::ldexp(1.0, -9) + 1e-2 * 40 * lr) << "column " << col;
    EXPECT_LT(got[0][col].item<double>(), 1.0) << "the updates must add up, column " << col;
  }
  for (int64_t col : {0, 2}) EXPECT_EQ(got[0][col].item<double>(), 1.0) << "unselected column " << col;
}

// What ZenFlow cannot run is an error naming the key at initialize.
TEST(ZenFlow, WhatItCannotRunIsRefusedByName) {
  tiny_gpt::ensure_comm();
  Rule rule;
  auto error = [](const std::string& json) {
    deepspeed::models::GPT model = tiny_gpt::make_model(tiny_gpt::config());
    try {
      deepspeed::initialize(model, deepspeed::Config::from_string(json));
    } catch (const deepspeed::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto with = [&](const std::string& from, const std::string& to, std::string json = "") {
    if (json.empty()) json = zenflow_json(rule, 2);
    const auto at = json.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return json.replace(at, from.size(), to);
  };
  const std::string gas = error(with("\"steps_per_print\"", "\"gradient_accumulation_steps\": 2, \"steps_per_print\""));
  EXPECT_NE(gas.find("zero_optimization.zenflow: update_interval takes the place of gradient_accumulation_steps"),
            std::string::npos) << gas;
  // SGD takes no eps.
  const std::string no_eps = with(", \"eps\": " + c10::str(Rule().eps), "");
  const std::string sgd = error(with("\"type\": \"AdamW\"", "\"type\": \"SGD\"", no_eps));
  EXPECT_NE(sgd.find("needs the config's Adam or AdamW optimizer"), std::string::npos) << sgd;
  const std::string fp16 = error(with("\"steps_per_print\"", "\"fp16\": {\"enabled\": true}, \"steps_per_print\""));
  EXPECT_NE(fp16.find("zero_optimization.zenflow: fp16"), std::string::npos) << fp16;
  const std::string bias = error(with("\"weight_decay\"", "\"bias_correction\": false, \"weight_decay\""));
  EXPECT_NE(bias.find("bias_correction false is not supported"), std::string::npos) << bias;
  const std::string cycle = error(with("\"steps_per_print\"", "\"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                                       "{\"cycle_min_lr\": 0.001, \"cycle_max_lr\": 0.003}}, \"steps_per_print\""));
  EXPECT_NE(cycle.find("OneCycle's momentum cycling"), std::string::npos) << cycle;

}

// A checkpoint saved at the end of an update window holds the selective state (columns, fp32 values, moments, step
// counts) and the iteration: a fresh engine that loads it continues exactly as the run that saved. Its masters hold
// the selected values, so an engine without ZenFlow that loads it starts from the model the saving run had. Saving
// inside a window (whose gradients the files cannot hold) is refused.
TEST(ZenFlow, ACheckpointResumesAsTheRunThatSaved) {
  tiny_gpt::ensure_comm();
  const int world = deepspeed::comm::get_world_size();
  const auto data = tiny_gpt::dataset(tiny_gpt::config());
  constexpr int kSaveAfter = 5;  // iteration 4 ends a window (warm-up 1, update_interval 2)
  for (bool overlap : {false, true}) {
    for (int stage : {1, 2, 3}) {
      const std::string label = "stage " + std::to_string(stage) + (overlap ? " overlapped" : "");
      const std::string dir = "/tmp/ds_zenflow_ckpt_w" + std::to_string(world) + "_s" + std::to_string(stage) +
                              (overlap ? "_o" : "");
      if (deepspeed::comm::get_rank() == 0) std::filesystem::remove_all(dir);
      deepspeed::comm::barrier();
      Rule rule;
      rule.overlap = overlap;
      const std::string json = zenflow_json(rule, stage);
      deepspeed::models::GPT saver = tiny_gpt::make_model(tiny_gpt::config());
      auto a = deepspeed::initialize(saver, deepspeed::Config::from_string(json));
      for (int i = 0; i < kSaveAfter; ++i) tiny_gpt::train(a, data, 1, i);
      a.save_checkpoint(dir, std::string("t"));
      const auto at_save = tiny_gpt::snapshot(saver);
      tiny_gpt::train(a, data, 1, kSaveAfter);  // iteration 5 ends no window
      try {
        a.save_checkpoint(dir, std::string("mid"));
        ADD_FAILURE() << "a save inside an update window must be refused, " << label;
      } catch (const deepspeed::Error& e) {
        EXPECT_NE(std::string(e.what()).find("ends an update window"), std::string::npos) << e.what();
      }
      for (int i = kSaveAfter + 1; i < kIterations; ++i) tiny_gpt::train(a, data, 1, i);
      const auto continued = tiny_gpt::snapshot(saver);

      deepspeed::LoadCheckpointOptions tag_t;
      tag_t.tag = "t";
      deepspeed::models::GPT loader = tiny_gpt::make_model(tiny_gpt::config());
      auto b = deepspeed::initialize(loader, deepspeed::Config::from_string(json));
      ASSERT_TRUE(b.load_checkpoint(dir, tag_t).has_value());
      for (int i = kSaveAfter; i < kIterations; ++i) tiny_gpt::train(b, data, 1, i);
      EXPECT_EQ(tiny_gpt::max_relative_error(tiny_gpt::snapshot(loader), continued), 0.0) << label;
      // Samples count iterations (a step spans update_interval of them), before and after the resume.
      EXPECT_EQ(a.global_samples(), kIterations * kMicro * world) << label;
      EXPECT_EQ(b.global_samples(), kIterations * kMicro * world) << label;

      deepspeed::models::GPT plain = tiny_gpt::make_model(tiny_gpt::config());
      std::string plain_json = json;
      plain_json.replace(plain_json.find(", \"zenflow\""), plain_json.find("}}", plain_json.find("\"zenflow\"")) + 1 -
                                                             plain_json.find(", \"zenflow\""), "");
      auto c = deepspeed::initialize(plain, deepspeed::Config::from_string(plain_json));
      ASSERT_TRUE(c.load_checkpoint(dir, tag_t).has_value());
      EXPECT_EQ(tiny_gpt::max_relative_error(tiny_gpt::snapshot(plain), at_save), 0.0) << label;
      deepspeed::comm::barrier();
      if (deepspeed::comm::get_rank() == 0) std::filesystem::remove_all(dir);
    }
  }
}

// update_interval "auto": a checkpoint saved where a window starts resumes exactly (the new engine's window starts
// at the loaded iteration); inside a window the save is refused.
TEST(ZenFlow, AnAdaptiveRunResumesAtAWindowStart) {
  tiny_gpt::ensure_comm();
  const int world = deepspeed::comm::get_world_size();
  const auto data = tiny_gpt::dataset(tiny_gpt::config());
  for (bool overlap : {false, true}) {
    const std::string dir = "/tmp/ds_zenflow_auto_w" + std::to_string(world) + (overlap ? "_o" : "");
    if (deepspeed::comm::get_rank() == 0) std::filesystem::remove_all(dir);
    deepspeed::comm::barrier();
    Rule rule;
    rule.adaptive = true;
    rule.overlap = overlap;
    rule.select_interval = 6;
    const std::string json = zenflow_json(rule, 2);
    deepspeed::models::GPT saver = tiny_gpt::make_model(tiny_gpt::config());
    auto a = deepspeed::initialize(saver, deepspeed::Config::from_string(json));
    // Train to the end of the first window the rule closed (past the warm-up, not before a selection).
    int save_after = 0;
    for (int i = 0; i < kIterations && save_after == 0; ++i) {
      const bool ends = a.is_gradient_accumulation_boundary();
      tiny_gpt::train(a, data, 1, i);
      if (ends && i >= rule.warmup && (i + 1) % rule.select_interval != 0) save_after = i + 1;
    }
    ASSERT_GT(save_after, 0) << "no window closed by the rule";
    ASSERT_LT(save_after, kIterations - 1);
    a.save_checkpoint(dir, std::string("t"));
    ASSERT_FALSE(a.is_gradient_accumulation_boundary());  // a window of one iteration cannot follow the rule's end
    tiny_gpt::train(a, data, 1, save_after);
    EXPECT_THROW(a.save_checkpoint(dir, std::string("mid")), deepspeed::Error);
    for (int i = save_after + 1; i < kIterations; ++i) tiny_gpt::train(a, data, 1, i);

    deepspeed::models::GPT loader = tiny_gpt::make_model(tiny_gpt::config());
    auto b = deepspeed::initialize(loader, deepspeed::Config::from_string(json));
    deepspeed::LoadCheckpointOptions tag_t;
    tag_t.tag = "t";
    ASSERT_TRUE(b.load_checkpoint(dir, tag_t).has_value());
    for (int i = save_after; i < kIterations; ++i) tiny_gpt::train(b, data, 1, i);
    EXPECT_EQ(tiny_gpt::max_relative_error(tiny_gpt::snapshot(loader), tiny_gpt::snapshot(saver)), 0.0)
        << "saved after iteration " << save_after - 1 << (overlap ? ", overlapped" : "");
    // The module alone loaded into a run that goes on: its window starts at the load (so a save is allowed at once,
    // and the next window's step divides by its own length, not by every iteration since the start).
    deepspeed::LoadCheckpointOptions module_only = tag_t;
    module_only.load_module_only = true;
    ASSERT_TRUE(a.load_checkpoint(dir, module_only).has_value());
    a.save_checkpoint(dir, std::string("after_module_only"));
    deepspeed::comm::barrier();
    if (deepspeed::comm::get_rank() == 0) std::filesystem::remove_all(dir);
  }
}

// A checkpoint saved during the warm-up (no selection yet) resumed under a shorter warm-up: the first selective
// iteration selects, whatever the schedule says, instead of updating columns never chosen.
TEST(ZenFlow, AResumeAtAShorterWarmUpSelectsFirst) {
  tiny_gpt::ensure_comm();
  const int world = deepspeed::comm::get_world_size();
  const std::string dir = "/tmp/ds_zenflow_warmup_w" + std::to_string(world);
  if (deepspeed::comm::get_rank() == 0) std::filesystem::remove_all(dir);
  deepspeed::comm::barrier();
  const auto data = tiny_gpt::dataset(tiny_gpt::config());
  Rule long_warmup;
  long_warmup.warmup = 4;
  deepspeed::models::GPT saver = tiny_gpt::make_model(tiny_gpt::config());
  auto a = deepspeed::initialize(saver, deepspeed::Config::from_string(zenflow_json(long_warmup, 2)));
  for (int i = 0; i < 2; ++i) tiny_gpt::train(a, data, 1, i);
  a.save_checkpoint(dir, std::string("w"));
  deepspeed::models::GPT loader = tiny_gpt::make_model(tiny_gpt::config());
  auto b = deepspeed::initialize(loader, deepspeed::Config::from_string(zenflow_json(Rule(), 2)));  // warm-up 1
  deepspeed::LoadCheckpointOptions o;
  o.tag = "w";
  ASSERT_TRUE(b.load_checkpoint(dir, o).has_value());
  const auto before = tiny_gpt::snapshot(loader);
  for (int i = 2; i < 5; ++i) tiny_gpt::train(b, data, 1, i);
  EXPECT_GT(tiny_gpt::max_relative_error(tiny_gpt::snapshot(loader), before), 1e-4) << "it trains on";
  for (const auto& p : tiny_gpt::snapshot(loader)) EXPECT_TRUE(at::isfinite(p).all().item<bool>());
  deepspeed::comm::barrier();
  if (deepspeed::comm::get_rank() == 0) std::filesystem::remove_all(dir);
}

TEST(ZenFlowSchedule, WindowsAndSelectionsFollowDeepSpeedsCounting) {
  deepspeed::config::ZenFlowConfig c;
  c.full_warm_up_rounds = 2;
  c.update_interval = 3;
  c.select_strategy = "step";
  c.select_interval = 6;
  const auto s = deepspeed::runtime::ZenFlowSchedule::from_config(c);
  std::vector<int64_t> windows, selections;
  for (int64_t i = 0; i < 14; ++i) {
    if (s.ends_window(i)) windows.push_back(i);
    if (s.selects(i)) selections.push_back(i);
  }
  EXPECT_EQ(windows, (std::vector<int64_t>{0, 1, 4, 5, 7, 10, 11, 13}));
  EXPECT_EQ(selections, (std::vector<int64_t>{2, 6, 12}));
  c.select_strategy = "epoch";
  c.select_interval = 2;
  c.steps_per_epoch = 5;
  EXPECT_EQ(deepspeed::runtime::ZenFlowSchedule::from_config(c).select_interval, 10);
  c.steps_per_epoch.reset();  // no epoch length: one selection, when the warm-up ends
  EXPECT_EQ(deepspeed::runtime::ZenFlowSchedule::from_config(c).select_interval, 0);
  c.select_strategy = "step";
  c.select_interval = 2;  // shorter than update_interval
  EXPECT_THROW(deepspeed::runtime::ZenFlowSchedule::from_config(c), deepspeed::ConfigError);
}

}  // namespace
