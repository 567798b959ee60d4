#include "zero/grad_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "deepspeed/error.h"
#include "zero/grad_accumulator_ref.h"
#include "zero/wall_clock.h"

namespace deepspeed::zero {

struct Bucket {
  size_t group = 0;
  int64_t begin = 0, end = 0;  // range of the group's flat buffer
  int pending_init = 0;
  int pending = 0;
  bool launched = false;
  at::Tensor staging;  // kPartitioned: the bucket's gradients, fp32
  at::Tensor wire;     // the bucket cast to comm_dtype while it is reduced (undefined when that is fp32)
  std::vector<comm::Work> works;
  int64_t size() const { return end - begin; }
};

struct ParamSlot {
  size_t group, index;
  int bucket;
};

// Free staging buffers kept for reuse between buckets and micro-steps.
constexpr size_t kMaxPooled = 2;
// Staging buffers alive at once (in flight, being filled or pooled): enough for a few reductions to overlap the
// rest of backward, few enough that stage 2 never approaches a full gradient.
constexpr int kMaxLiveStaging = 4;

struct GradReducer::State {
  std::vector<FlatGroup>* groups = nullptr;
  comm::ProcessGroup group;
  GradReducerOptions options;
  at::TensorOptions fp32;  // fp32 on the parameters' device: staging buffers and partitions
  std::vector<Bucket> buckets;
  std::vector<ParamSlot> slots;      // flat parameter index -> where it lives
  std::vector<char> fired;           // flat parameter index -> counted this pass
  std::vector<at::Tensor> partition; // kPartitioned: this rank's gradient partition per group (partition_dtype)
  std::vector<at::Tensor> pool;      // kPartitioned: free staging buffers
  std::vector<size_t> in_flight;     // kPartitioned: launched buckets not yet completed, oldest first
  int live_staging = 0;              // kPartitioned: staging buffers allocated and not dropped
  size_t next_launch = 0;
  size_t launched_in_hooks = 0;
  double blocked_ms = 0;  // see GradReducer::blocked_ms
  WaitClock clock;        // the spans behind blocked_ms
  bool armed = false;
  bool reducing = false;  // this pass ends an accumulation window: what complete() leaves is final
  std::mutex mutex;  // autograd may run hooks from its worker thread
  // Kept alive here: a parameter holds only a weak pointer to its AccumulateGrad node (FACTS.md).
  std::vector<GradAccumulatorRef> accumulators;
  std::vector<uintptr_t> hook_keys;

  // Gradients are averaged over the whole data-parallel group, even where a group's copies live on fewer ranks
  // (MoE experts: the copies on an expert-data-parallel group already hold the sum over every expert-parallel rank's
  // tokens, so dividing by the full world gives the same mean gradient as experts replicated everywhere).
  int world() const { return group.size(); }
  // The ranks that hold copies of bucket b's parameters, over which it is reduced.
  const comm::ProcessGroup& copies(const Bucket& b) const { return copies_group((*groups)[b.group], group); }
  // gradient_allreduce_op "sum" reduces the ranks' gradients as they are: no factor before or after (as DeepSpeed,
  // which then ignores prescale_gradients and gradient_predivide_factor too).
  double pre_factor() const {
    if (!options.average) return 1.0;
    return options.prescale_gradients ? 1.0 / world() : 1.0 / options.gradient_predivide_factor;
  }
  double post_factor() const {
    if (!options.average) return 1.0;
    return options.prescale_gradients ? 1.0 : options.gradient_predivide_factor / world();
  }
  const zero::PartitionLayout& layout(const Bucket& b) const { return (*groups)[b.group].layout; }

  at::Tensor source(Bucket& b) {
    if (options.storage == GradStorage::kPartitioned) {
      if (!b.staging.defined()) b.staging = acquire(b.size());  // a bucket of unused parameters
      return b.staging;
    }
    return (*groups)[b.group].grads_flat.narrow(0, b.begin, b.size());
  }

  at::Tensor acquire(int64_t n) {
    for (size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].numel() >= n) {
        at::Tensor t = pool[i].narrow(0, 0, n);
        pool.erase(pool.begin() + static_cast<long>(i));
        return t.zero_();
      }
    }
    // Past the live limit, finish the oldest reduction in flight rather than allocating another buffer; drop
    // pooled buffers too small for this bucket instead of keeping one per size.
    if (live_staging >= kMaxLiveStaging && !in_flight.empty()) {
      complete(buckets[in_flight.front()]);
      return acquire(n);
    }
    live_staging -= static_cast<int>(pool.size());
    pool.clear();
    ++live_staging;
    return at::zeros({n}, fp32);
  }

  void release(at::Tensor buffer) {
    pool.push_back(std::move(buffer));
    if (pool.size() > kMaxPooled) {
      auto smallest = std::min_element(pool.begin(), pool.end(),
                                       [](const at::Tensor& a, const at::Tensor& b) { return a.numel() < b.numel(); });
      pool.erase(smallest);
      --live_staging;
    }
  }

  void launch(Bucket& b) {
    at::Tensor src = source(b);
    b.launched = true;
    comm::ProcessGroup cg = copies(b);
    // A lower-precision wire type rounds each rank's contribution before the sum, as DeepSpeed's cast does; with
    // nothing to communicate nothing is rounded.
    const bool cast = cg.size() > 1 && options.comm_dtype != src.scalar_type();
    at::Tensor wire = cast ? src.to(options.comm_dtype) : src;
    if (world() > 1) {
      double pre = pre_factor();
      if (pre != 1.0) wire.mul_(pre);
    }
    if (cg.size() == 1) {
      // Nothing to communicate; stage 2 moves the bucket into its partition right away.
      if (options.storage == GradStorage::kPartitioned) complete(b);
      return;
    }
    if (cast) b.wire = wire;
    if (options.reduction == Reduction::kAllReduce) {
      b.works.push_back(cg.all_reduce(wire, comm::ReduceOp::kSum, /*async_op=*/true));
    } else {
      for (const auto& seg : layout(b).owner_segments(b.begin, b.end)) {
        at::Tensor piece = wire.narrow(0, seg.begin - b.begin, seg.end - seg.begin);
        b.works.push_back(cg.reduce(piece, cg.ranks()[seg.owner], comm::ReduceOp::kSum, /*async_op=*/true));
      }
    }
    if (options.storage == GradStorage::kPartitioned) in_flight.push_back(&b - buckets.data());
  }

  // Waits for a launched bucket and leaves its result where the optimizer reads it.
  void complete(Bucket& b) {
    for (auto& w : b.works) w.wait();
    b.works.clear();
    const double post = world() > 1 ? post_factor() : 1.0;
    const zero::PartitionLayout& lay = layout(b);
    const int me = lay.rank();
    at::Tensor src = source(b);
    // Averaging this rank's reduced elements (its owner segments when reduced to owners).
    auto average = [&](const at::Tensor& t) {
      if (options.reduction == Reduction::kAllReduce) {
        t.mul_(post);
      } else {
        for (const auto& seg : lay.owner_segments(b.begin, b.end))
          if (seg.owner == me) t.narrow(0, seg.begin - b.begin, seg.end - seg.begin).mul_(post);
      }
    };
    bool averaged = false;
    if (b.wire.defined()) {
      // A wire wider than the buffer (an fp32 wire into 16-bit gradients), or any other wire into fp16, is averaged
      // before it is rounded into it: the sum over ranks may not fit fp16's range where the mean does, and it is
      // one rounding, not two.
      if (options.storage != GradStorage::kPartitioned && post != 1.0 &&
          (b.wire.element_size() > src.element_size() || src.scalar_type() == at::kHalf)) {
        average(b.wire);
        averaged = true;
      }
      src.copy_(b.wire);
      b.wire = at::Tensor();
    }
    if (options.storage != GradStorage::kPartitioned) {
      if (post != 1.0 && !averaged) average(src);
      announce_final(b);
      return;
    }
    for (const auto& seg : lay.owner_segments(b.begin, b.end)) {
      if (seg.owner != me) continue;
      at::Tensor piece = src.narrow(0, seg.begin - b.begin, seg.end - seg.begin);
      at::Tensor target = partition[b.group].narrow(0, seg.begin - lay.begin(me), seg.end - seg.begin);
      if (post == 1.0) {
        target.add_(piece);
      } else {
        target.add_(piece, post);
      }
    }
    announce_final(b);
    release(b.staging);
    b.staging = at::Tensor();
    for (size_t i = 0; i < in_flight.size(); ++i) {
      if (&buckets[in_flight[i]] == &b) {
        in_flight.erase(in_flight.begin() + static_cast<long>(i));
        break;
      }
    }
  }

  // After complete(b) in a reducing pass: this rank's share of the bucket's range holds its final gradient.
  void announce_final(const Bucket& b) {
    if (!reducing || !options.on_partition_final) return;
    const zero::PartitionLayout& lay = layout(b);
    const int64_t mine = lay.begin(lay.rank());
    const int64_t lo = std::max(b.begin, mine), hi = std::min(b.end, lay.end(lay.rank()));
    if (lo >= hi) return;
    const at::Tensor grads = options.storage == GradStorage::kPartitioned
                                 ? partition[b.group].narrow(0, lo - mine, hi - lo)
                                 : (*groups)[b.group].grads_flat.narrow(0, lo, hi - lo);
    options.on_partition_final(b.group, lo - mine, grads);
  }

  // Launch, in the fixed order, every bucket that is complete and whose predecessors are launched.
  void launch_ready_in_order() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      launch(buckets[next_launch]);
      ++next_launch;
      ++launched_in_hooks;
    }
  }

  void on_grad_ready(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    const ParamSlot& slot = slots[index];
    FlatGroup& fg = (*groups)[slot.group];
    at::Tensor& p = fg.params[slot.index];
    Bucket& b = buckets[slot.bucket];
    if (options.storage != GradStorage::kViews && p.grad().defined()) {
      const int64_t offset = fg.offsets[slot.index];
      at::Tensor grad = p.grad().reshape({-1});
      if (options.storage == GradStorage::kAccumulate) {
        fg.grads_flat.narrow(0, offset, grad.numel()).add_(grad);
      } else {
        if (!b.staging.defined()) b.staging = acquire(b.size());
        b.staging.narrow(0, offset - b.begin, grad.numel()).add_(grad);
      }
      p.mutable_grad() = at::Tensor();  // the whole point: no full-size gradient survives the hook
    }
    if (!armed || fired[index]) return;
    fired[index] = 1;
    --b.pending;
    // Stage 2 reduces each full bucket right away even without overlap_comm (as DeepSpeed does), so staging
    // never holds more than a few buckets; without overlap it waits for each reduction before going on.
    const bool partitioned = options.storage == GradStorage::kPartitioned;
    if (!options.overlap_comm && !partitioned) return;
    // Most hooks find the next bucket still incomplete: nothing to launch, nothing to time (two events per hook
    // would be a cost on every parameter of every backward).
    if (next_launch >= buckets.size() || buckets[next_launch].pending != 0) return;
    WaitClock::Span span = clock.begin();
    const size_t first_new = next_launch;
    launch_ready_in_order();
    if (!options.overlap_comm)  // (a bucket with no other rank to reduce with completed at its launch)
      for (size_t i = first_new; i < next_launch; ++i)
        if (buckets[i].staging.defined()) complete(buckets[i]);
    clock.end(std::move(span), &blocked_ms);
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
  DS_CHECK(options.bucket_elems >= 1, "reduce_bucket_size must be >= 1, got ", options.bucket_elems);
  DS_CHECK(options.gradient_predivide_factor > 0, "gradient_predivide_factor must be > 0, got ",
           options.gradient_predivide_factor);
  State& s = *state_;
  s.groups = &groups;
  s.group = std::move(group);
  s.options = options;
  s.fp32 = at::TensorOptions().dtype(at::kFloat).device(groups.empty() ? c10::Device(c10::kCPU)
                                                                        : groups.front().params_flat.device());
  for (auto& g : groups) {
    DS_ASSERT(options.storage == GradStorage::kPartitioned || g.grads_flat.defined(), "no gradient buffer");
    if (options.storage == GradStorage::kPartitioned)
      s.partition.push_back(at::zeros({g.layout.partition_size()}, s.fp32.dtype(options.partition_dtype)));
  }

  if (options.storage == GradStorage::kPartitioned) {
    int64_t elems = 0;
    for (const auto& g : groups) elems += g.numel();
    s.options.bucket_elems = sized_bucket_elems(options.bucket_elems, elems, std::max(s.group.size(), 1));
    options.bucket_elems = s.options.bucket_elems;
  }
  // Flat parameter index: groups in order, parameters in order. Buckets: from the last group's end backwards.
  size_t total = 0;
  for (auto& g : groups) total += g.params.size();
  s.slots.resize(total);
  s.fired.assign(total, 0);
  size_t flat_index = total;
  for (size_t g = groups.size(); g-- > 0;) {
    FlatGroup& fg = groups[g];
    int64_t end = fg.numel();
    int count = 0;
    for (size_t i = fg.params.size(); i-- > 0;) {
      --flat_index;
      const int64_t start = i == 0 ? 0 : fg.offsets[i];
      s.slots[flat_index] = {g, i, static_cast<int>(s.buckets.size())};
      ++count;
      if (end - start >= options.bucket_elems || i == 0) {
        Bucket b;
        b.group = g;
        b.begin = start;
        b.end = end;
        b.pending_init = count;
        s.buckets.push_back(std::move(b));
        end = start;
        count = 0;
      }
    }
  }

  // fp32 stages 0/1 on one rank have nothing to move and nothing to reduce: no hooks needed.
  if (options.storage == GradStorage::kViews && s.group.size() <= 1) return;
  flat_index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i, ++flat_index) {
      auto acc = torch::autograd::impl::grad_accumulator(groups[g].params[i]);
      DS_ASSERT(acc != nullptr, "parameter without a gradient accumulator");
      s.hook_keys.push_back(acc->add_post_hook(std::make_unique<GradReadyHook>(state_, flat_index)));
      s.accumulators.push_back(std::move(acc));
    }
  }
}

int64_t GradReducer::sized_bucket_elems(int64_t configured, int64_t total_elems, int world) {
  constexpr int64_t kFloor = int64_t{1} << 16;  // 256 KiB of fp32: below it collectives outnumber the gain
  const int64_t share = (total_elems + world - 1) / world;
  // On many ranks the share gets small: the buckets then stop at a sixteenth of the whole gradient over the live
  // buffers (staging still a small part of what stage 1 would hold), so that a bucket's chunk per rank stays large
  // enough for its collective not to be latency-bound.
  const int64_t world_independent = total_elems / (16 * kMaxLiveStaging);
  return std::min(configured, std::max({kFloor, share / kMaxLiveStaging, world_independent}));
}

int64_t GradReducer::bucket_elems() const { return state_->options.bucket_elems; }

GradReducer::~GradReducer() {
  for (size_t i = 0; i < state_->accumulators.size(); ++i)
    state_->accumulators[i]->del_post_hook(state_->hook_keys[i]);
}

void GradReducer::begin_backward(bool reduce) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  State& s = *state_;
  const bool partitioned = s.options.storage == GradStorage::kPartitioned;
  s.armed = partitioned || (reduce && s.group.size() > 1);
  s.reducing = reduce;
  s.next_launch = 0;
  s.launched_in_hooks = 0;
  std::fill(s.fired.begin(), s.fired.end(), 0);
  for (auto& b : s.buckets) {
    b.pending = b.pending_init;
    b.launched = false;
    b.works.clear();
    b.wire = at::Tensor();
  }
}

void GradReducer::finish_backward() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.armed) return;
  s.armed = false;
  WaitClock::Span span = s.clock.begin();
  for (; s.next_launch < s.buckets.size(); ++s.next_launch) s.launch(s.buckets[s.next_launch]);
  for (auto& b : s.buckets) {
    if (s.options.storage == GradStorage::kPartitioned && !b.staging.defined()) continue;  // completed early
    s.complete(b);
  }
  s.in_flight.clear();
  s.clock.end(std::move(span), &s.blocked_ms);
}

at::Tensor GradReducer::partition_grads(size_t g) const {
  const State& s = *state_;
  if (s.options.storage == GradStorage::kPartitioned) return s.partition.at(g);
  const FlatGroup& fg = s.groups->at(g);
  return fg.grads_flat.narrow(0, fg.layout.begin(fg.layout.rank()), fg.layout.partition_size());
}

void GradReducer::zero_partition_grads() {
  for (auto& t : state_->partition) t.zero_();
}

size_t GradReducer::num_buckets() const { return state_->buckets.size(); }

double GradReducer::blocked_ms() const {
  state_->clock.resolve();
  return state_->blocked_ms;
}

size_t GradReducer::buckets_launched_during_backward() const { return state_->launched_in_hooks; }

int64_t GradReducer::staging_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : state_->pool) bytes += t.numel() * 4;
  for (const auto& b : state_->buckets) {
    if (b.staging.defined()) bytes += b.staging.numel() * 4;
    if (b.wire.defined()) bytes += static_cast<int64_t>(b.wire.nbytes());
  }
  return bytes;
}

}  // namespace deepspeed::zero
