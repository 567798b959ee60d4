#include "runtime/speculative_step.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>

#include "deepspeed/error.h"
#include "runtime/fp32_operands.h"
#include "runtime/worker_thread.h"

namespace deepspeed::runtime {

SpeculativeStep::SpeculativeStep(EngineOptimizer& optimizer, std::vector<at::Tensor> masters, bool may_roll_back,
                                 int worker_threads)
    : optimizer_(optimizer), masters_(std::move(masters)), may_roll_back_(may_roll_back),
      worker_threads_(std::max(1, worker_threads)) {
  worker_ = std::thread([this, setup = WorkerThreadSetup::of_caller(worker_threads_)] {
    setup.apply();
    work();
  });
}

int SpeculativeStep::share_of(int threads, double perc) {
  const int kept = static_cast<int>((1.0 - perc) * threads);
  return std::max(1, threads - kept);
}

SpeculativeStep::~SpeculativeStep() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void SpeculativeStep::begin(double unscale) {
  DS_ASSERT(!pending_, "a speculative step is still pending");
  unscale_ = unscale;
  optimizer_.begin_step();
  done_.clear();
  pending_ = true;
}

void SpeculativeStep::submit(size_t group, int64_t offset, const at::Tensor& grad) {
  if (!pending_ || grad.numel() == 0) return;
  Slice slice{group, offset, grad.numel(), grad, nullptr, {}};
  if (!grad.is_cpu()) {
    // The gradient's last write (the reduce-scatter's add into the accumulator) is queued on the caller's current
    // stream of its device, which need not be the one the worker's copy would follow.
    auto& acc = accelerator::get_accelerator();
    slice.ready = acc.new_event();
    slice.ready->record(acc.current_stream(grad.device().index()).get());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(slice));
  }
  cv_.notify_all();
}

void SpeculativeStep::work() {
  at::NoGradGuard no_grad;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    Slice s = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    std::exception_ptr error;
    try {
      run(s);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (!error) done_.push_back(std::move(s));
    --busy_;
    cv_.notify_all();
  }
}

void SpeculativeStep::run(Slice& s) {
  observed_threads_.store(at::get_num_threads());
  at::Tensor master = masters_.at(s.group).narrow(0, s.offset, s.n);
  std::vector<at::Tensor> states = optimizer_.group_state(s.group);
  for (auto& t : states) t = t.narrow(0, s.offset, s.n);
  if (may_roll_back_) {
    s.before.push_back(master.clone());
    for (const auto& t : states) s.before.push_back(t.clone());
  }
  // The same arithmetic as the engine's step: the gradient times the unscale coefficient, then the kernel. The
  // stage's gradient itself stays as it is (the global norm is taken from it after backward).
  at::Tensor grad = s.grad;
  if (!grad.is_cpu()) {
    s.ready->synchronize();
    if (host_grad_.numel() < s.n || host_grad_.scalar_type() != grad.scalar_type())
      host_grad_ = accelerator::get_accelerator().empty_pinned({s.n}, grad.scalar_type());
    at::Tensor host = host_grad_.narrow(0, 0, s.n);
    host.copy_(grad.reshape({-1}));  // into pinned memory: a DMA the worker waits for, no staging through pageable
    grad = host;
  }
  s.grad = at::Tensor();
  s.ready.reset();
  // fp32 operands are stepped in place; 16-bit masters or states (bf16/fp16 master weights, bf16 optimizer states)
  // and 16-bit gradients in fp32 a chunk at a time, as the engine's synchronous step does, so the two agree bit for
  // bit.
  Fp32Operands fp32(std::min(Fp32Operands::kChunk, s.n), at::TensorOptions().dtype(at::kFloat));
  fp32.step_chunks(unscale_, master, grad, states.size() > 0 ? states[0] : at::Tensor(),
                   states.size() > 1 ? states[1] : at::Tensor(), at::Tensor(),
                   [&](const at::Tensor& m, const at::Tensor& g, const at::Tensor& first, const at::Tensor& second,
                       const at::Tensor& copy) { optimizer_.step_slice(s.group, m, g, first, second, copy); });
}

void SpeculativeStep::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    std::rethrow_exception(e);
  }
}

void SpeculativeStep::rollback() {
  DS_ASSERT(may_roll_back_, "a speculative step without copies cannot be rolled back");
  at::NoGradGuard no_grad;
  for (const Slice& s : done_) {
    masters_.at(s.group).narrow(0, s.offset, s.n).copy_(s.before[0]);
    std::vector<at::Tensor> states = optimizer_.group_state(s.group);
    for (size_t k = 0; k < states.size(); ++k) states[k].narrow(0, s.offset, s.n).copy_(s.before[k + 1]);
  }
  optimizer_.set_step_count(optimizer_.step_count() - 1);
  slices_ += static_cast<int64_t>(done_.size());
  done_.clear();
  pending_ = false;
  ++rollbacks_;
}

void SpeculativeStep::abandon() noexcept {
  if (!pending_) return;
  try {
    wait();
  } catch (...) {
  }
  try {
    if (may_roll_back_) {
      rollback();
      return;
    }
    optimizer_.set_step_count(optimizer_.step_count() - 1);
  } catch (...) {
  }
  done_.clear();
  pending_ = false;
}

void SpeculativeStep::accept() {
  slices_ += static_cast<int64_t>(done_.size());
  done_.clear();
  pending_ = false;
}

}  // namespace deepspeed::runtime
