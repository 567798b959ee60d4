// See ragged_scheduler.h.
#include "inference/ragged_scheduler.h"

#include <algorithm>

#include "deepspeed/error.h"

namespace deepspeed::inference {

RaggedScheduler::RaggedScheduler(int64_t max_tokens, int64_t max_sequences, int64_t block_size,
                                 KVBlockAllocator& allocator)
    : max_tokens_(max_tokens), max_sequences_(max_sequences), block_size_(block_size), allocator_(allocator) {}

void RaggedScheduler::add(std::unique_ptr<RaggedRequest> request) { waiting_.push_back(std::move(request)); }

std::unique_ptr<RaggedRequest> RaggedScheduler::remove(int64_t id) {
  auto matches = [id](const std::unique_ptr<RaggedRequest>& r) { return r->id == id; };
  std::unique_ptr<RaggedRequest> out;
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), matches); it != waiting_.end()) {
    out = std::move(*it);
    waiting_.erase(it);
  } else if (auto jt = std::find_if(running_.begin(), running_.end(), matches); jt != running_.end()) {
    out = std::move(*jt);
    running_.erase(jt);
  }
  if (out) allocator_.free(out->blocks);
  return out;
}

void RaggedScheduler::add_to_plan(RaggedRequest& r, int64_t length, RaggedPlan& plan) {
  models::PagedSequence s;
  s.start = r.cached;
  s.length = length;
  s.blocks = r.blocks;
  s.wants_logits = r.cached + length == static_cast<int64_t>(r.tokens.size());
  plan.pass.tokens.insert(plan.pass.tokens.end(), r.tokens.begin() + r.cached, r.tokens.begin() + r.cached + length);
  if (r.cached < r.prompt_length) plan.prompt_tokens += std::min(length, r.prompt_length - r.cached);
  plan.pass.sequences.push_back(std::move(s));
  plan.requests.push_back(&r);
  r.cached += length;
  r.last_run = passes_;
}

RaggedPlan RaggedScheduler::schedule() {
  RaggedPlan plan;
  int64_t budget = max_tokens_;
  auto seats = [&] { return static_cast<int64_t>(plan.pass.sequences.size()) < max_sequences_; };
  // 1. Decodes: every running request past its prompt has one new token to run.
  std::vector<RaggedRequest*> decoders;
  for (const auto& r : running_)
    if (r->cached >= r->prompt_length) decoders.push_back(r.get());
  std::stable_sort(decoders.begin(), decoders.end(),
                   [](const RaggedRequest* a, const RaggedRequest* b) { return a->last_run < b->last_run; });
  for (RaggedRequest* r : decoders) {
    if (budget == 0 || !seats()) break;
    add_to_plan(*r, 1, plan);
    --budget;
  }
  // 2. Prompt chunks of admitted requests (SplitFuse: a long prompt spans several passes).
  for (const auto& r : running_) {
    if (budget == 0 || !seats()) break;
    if (r->cached >= r->prompt_length) continue;
    const int64_t n = std::min(budget, r->prompt_length - r->cached);
    add_to_plan(*r, n, plan);
    budget -= n;
  }
  // 3. Admission, first come first served.
  while (budget > 0 && seats() && !waiting_.empty()) {
    RaggedRequest& r = *waiting_.front();
    if (!allocator_.allocate(r.blocks_needed, r.blocks)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    const int64_t n = std::min(budget, r.prompt_length);
    add_to_plan(r, n, plan);
    budget -= n;
  }
  ++passes_;
  return plan;
}

}  // namespace deepspeed::inference
