#include "runtime/grad_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>

#include "deepspeed/error.h"

namespace deepspeed::runtime {

struct Bucket {
  at::Tensor grads;  // a range of one group's grads_flat
  int pending_init = 0;
  int pending = 0;
  bool launched = false;
  comm::Work work;
};

struct GradReducer::State {
  comm::ProcessGroup group;
  GradReducerOptions options;
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of_param;  // flat parameter index -> bucket
  std::vector<char> fired;           // flat parameter index -> hook fired this pass
  size_t next_launch = 0;
  size_t launched_in_hooks = 0;
  bool armed = false;
  std::mutex mutex;  // autograd may run hooks from its worker thread
  // Kept alive here: a parameter holds only a weak pointer to its AccumulateGrad node (FACTS.md).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hook_keys;

  double pre_factor() const {
    int n = group.size();
    return options.prescale_gradients ? 1.0 / n : 1.0 / options.gradient_predivide_factor;
  }
  double post_factor() const {
    int n = group.size();
    return options.prescale_gradients ? 1.0 : options.gradient_predivide_factor / n;
  }

  void launch(Bucket& b) {
    double pre = pre_factor();
    if (pre != 1.0) b.grads.mul_(pre);
    b.work = group.all_reduce(b.grads, comm::ReduceOp::kSum, /*async_op=*/true);
    b.launched = true;
  }

  // Launch, in the fixed order, every bucket that is complete and whose predecessors are launched.
  void launch_ready_in_order() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      launch(buckets[next_launch]);
      ++next_launch;
      ++launched_in_hooks;
    }
  }

  void on_grad_ready(size_t param_index) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed || fired[param_index]) return;
    fired[param_index] = 1;
    Bucket& b = buckets[bucket_of_param[param_index]];
    --b.pending;
    if (options.overlap_comm) launch_ready_in_order();
  }
};

namespace {

class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::weak_ptr<GradReducer::State> state, size_t index) : state_(std::move(state)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    if (auto state = state_.lock()) state->on_grad_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<GradReducer::State> state_;
  size_t index_;
};

}  // namespace

GradReducer::GradReducer(std::vector<FlatGroup>& groups, comm::ProcessGroup group, GradReducerOptions options)
    : state_(std::make_shared<State>()) {
  DS_CHECK(options.bucket_elems >= 1, "allreduce_bucket_size must be >= 1, got ", options.bucket_elems);
  DS_CHECK(options.gradient_predivide_factor > 0, "gradient_predivide_factor must be > 0, got ",
           options.gradient_predivide_factor);
  state_->group = std::move(group);
  state_->options = options;

  // Flat parameter index: groups in order, parameters in order. Buckets: from the last group's end backwards.
  std::vector<std::pair<size_t, size_t>> index_of;  // flat index -> (group, param)
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params.size(); ++i) index_of.emplace_back(g, i);
  state_->bucket_of_param.assign(index_of.size(), -1);
  state_->fired.assign(index_of.size(), 0);

  size_t flat_index = index_of.size();
  for (size_t g = groups.size(); g-- > 0;) {
    FlatGroup& fg = groups[g];
    int64_t end = fg.numel();
    int64_t start = end;
    int count = 0;
    for (size_t i = fg.params.size(); i-- > 0;) {
      --flat_index;
      start = fg.offsets[i];
      state_->bucket_of_param[flat_index] = static_cast<int>(state_->buckets.size());
      ++count;
      bool close = (end - start >= options.bucket_elems) || i == 0;
      if (close) {
        Bucket b;
        b.grads = fg.grads_flat.narrow(0, start, end - start);
        b.pending_init = count;
        state_->buckets.push_back(std::move(b));
        end = start;
        count = 0;
      }
    }
  }

  if (state_->group.size() <= 1) return;  // nothing to reduce: no hooks needed
  flat_index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i, ++flat_index) {
      auto acc = torch::autograd::impl::grad_accumulator(groups[g].params[i]);
      DS_ASSERT(acc != nullptr, "parameter without a gradient accumulator");
      state_->hook_keys.push_back(
          acc->add_post_hook(std::make_unique<GradReadyHook>(state_, flat_index)));
      state_->accumulators.push_back(std::move(acc));
    }
  }
}

GradReducer::~GradReducer() {
  for (size_t i = 0; i < state_->accumulators.size(); ++i)
    state_->accumulators[i]->del_post_hook(state_->hook_keys[i]);
}

void GradReducer::begin_backward(bool reduce) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  State& s = *state_;
  s.armed = reduce && s.group.size() > 1;
  s.next_launch = 0;
  s.launched_in_hooks = 0;
  std::fill(s.fired.begin(), s.fired.end(), 0);
  for (auto& b : s.buckets) {
    b.pending = b.pending_init;
    b.launched = false;
    b.work = comm::Work();
  }
}

void GradReducer::finish_backward() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.armed) return;
    s.armed = false;
    for (; s.next_launch < s.buckets.size(); ++s.next_launch) s.launch(s.buckets[s.next_launch]);
  }
  double post = s.post_factor();
  for (auto& b : s.buckets) {
    b.work.wait();
    if (post != 1.0) b.grads.mul_(post);
  }
}

size_t GradReducer::num_buckets() const { return state_->buckets.size(); }

size_t GradReducer::buckets_launched_during_backward() const { return state_->launched_in_hooks; }

}  // namespace deepspeed::runtime
