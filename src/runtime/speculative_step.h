// offload_optimizer.super_offload (SuperOffload's speculation-then-validation), stage 3 with optimizer offload to
// CPU: in the backward pass that ends an accumulation window, each partition's CPU optimizer step starts on a
// worker thread as soon as its gradient is reduced, before the global norm and the overflow check are known, on the
// assumption that the step will neither be skipped nor clipped. The engine then validates: if the step stands, the
// work is already done; if the gradients overflowed or clipping binds, every speculative update is rolled back and
// the step is taken (or skipped) as without speculation.
//
// The rollback restores copies taken just before each slice's update (masters and optimizer states), so it is
// exact; DeepSpeed inverts Adam's arithmetic instead, which needs no copies but is not exact. The copies cost
// (1 + number of optimizer states) x 4 bytes per element of this rank's partition (2 for 16-bit masters and states),
// in host memory, during the step, and are taken only when something can undo the step (gradient clipping, fp16
// loss scaling). 16-bit masters or states (bf16/fp16 master weights, bf16 optimizer states) step in fp32 a chunk
// at a time, as the synchronous step does.
//
// The worker runs its kernels with `worker_threads` OpenMP threads of its own: offload_optimizer.cpuadam_cores_perc's
// share of the training thread's count, by DeepSpeed's split (which gives its CPU Adam process those cores). The
// training thread keeps its whole count (DeepSpeed also confines its trainer to the other cores; a thread of ours
// shares the process with it, so it is left alone).
//
// Thread-safety: submit() is called from the training thread (during backward), the worker runs the updates;
// wait(), rollback() and begin() from the training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "deepspeed/accelerator.h"
#include "runtime/optimizer.h"

namespace deepspeed::runtime {

class SpeculativeStep {
 public:
  // `masters` are the optimizer's masters per group (host memory; fp32, or the model's 16-bit dtype).
  // `may_roll_back` false (no clipping, no loss scaling: nothing can change the step after the fact) takes no copies;
  // rollback() is then an error.
  // `worker_threads` >= 1: the worker's OpenMP thread count.
  SpeculativeStep(EngineOptimizer& optimizer, std::vector<at::Tensor> masters, bool may_roll_back,
                  int worker_threads);
  ~SpeculativeStep();  // finishes queued work first
  SpeculativeStep(const SpeculativeStep&) = delete;
  SpeculativeStep& operator=(const SpeculativeStep&) = delete;

  // A boundary backward begins: the optimizer's step count moves on (as its step() would) and slices submitted
  // from here are updated with their gradient times `unscale` (1 / the loss scale that produced it).
  void begin(double unscale);
  bool pending() const { return pending_; }
  bool may_roll_back() const { return may_roll_back_; }
  // Elements [offset, offset + grad.numel()) of group `group` have their final gradient `grad` (valid until the
  // step is over; read where it is and copied to host memory by the worker): their update is queued.
  void submit(size_t group, int64_t offset, const at::Tensor& grad);
  // Blocks until every queued update ran; rethrows what one threw.
  void wait();
  // After wait(): every speculative update undone and the step count restored; nothing pending after.
  void rollback();
  // After wait(): the speculation stands; nothing pending after.
  void accept();
  // After an error between begin() and the step: waits (dropping a worker's error), undoes what it can (everything
  // when copies were kept; else only the step count: the masters keep the updates already made) and ends the step.
  void abandon() noexcept;

  int64_t slices() const { return slices_; }        // slices updated speculatively, in all (kept or not)
  int64_t rollbacks() const { return rollbacks_; }  // steps rolled back
  // The thread count the worker's kernels run with (LibTorch's view from inside the worker), once it has run one.
  int worker_threads() const { return observed_threads_.load(); }

  // cpuadam_cores_perc's share of `threads` (the training thread's count), DeepSpeed's split: threads minus
  // int((1 - perc) x threads), and at least one.
  static int share_of(int threads, double perc);

 private:
  struct Slice {
    size_t group = 0;
    int64_t offset = 0, n = 0;
    at::Tensor grad;
    // A device gradient: recorded at submit() on the stream that produced it (the caller's current stream of the
    // gradient's device, a user's pool stream included); the worker waits for it before reading.
    std::shared_ptr<accelerator::Event> ready;
    std::vector<at::Tensor> before;  // master, then each state: what rollback restores
  };
  void run(Slice& s);
  void work();

  EngineOptimizer& optimizer_;
  std::vector<at::Tensor> masters_;
  bool may_roll_back_ = true;
  int worker_threads_ = 1;
  std::atomic<int> observed_threads_{0};
  double unscale_ = 1.0;
  bool pending_ = false;
  std::vector<Slice> done_;  // the worker's, read by the training thread after wait()
  at::Tensor host_grad_;     // the worker's: pinned where supported, reused by every slice (grown as needed)
  int64_t slices_ = 0, rollbacks_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Slice> queue_;
  size_t busy_ = 0;  // slices taken by the worker and not finished
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace deepspeed::runtime
