// Continuous batching with Dynamic SplitFuse (deepspeed/inference/ragged_engine.h): which requests' tokens the next
// forward pass runs. Each pass holds at most `max_tokens` tokens of at most `max_sequences` sequences:
//   1. one decode token of every running request that has a new token to run, the least recently run first;
//   2. the next chunk of running requests still in their prompt (admission order), as much as the budget leaves;
//   3. waiting requests, first come first served, each admitted when the free list has the blocks for its whole
//      length (prompt plus new-token limit), its first prompt chunk filling what the budget leaves. A request that
//      cannot get its blocks waits, and so do those behind it (no overtaking: a long request is not starved).
// Taking every block a request may need at admission means a running request never waits for a block, so the
// scheduler needs no preemption and cannot deadlock; the price is that a request that stops early (a stop token)
// held blocks it never wrote, until it finished.
// Not thread-safe: the engine's stepping thread alone owns it.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "deepspeed/inference/generation_config.h"
#include "deepspeed/inference/ragged_engine.h"
#include "deepspeed/models/llama.h"
#include "inference/kv_block_allocator.h"

namespace deepspeed::inference {

using TokenCallback = std::function<void(const TokenEvent&)>;

// One request as the scheduler and the engine track it.
struct RaggedRequest {
  int64_t id = 0;
  std::vector<int64_t> tokens;  // the prompt, then each generated token
  int64_t prompt_length = 0;
  int64_t new_token_limit = 0;  // GenerationConfig::new_token_limit of the prompt
  int64_t cached = 0;           // leading tokens whose keys and values are in the cache
  int64_t blocks_needed = 0;    // taken at admission: the positions it may ever cache
  std::vector<int64_t> blocks;  // its block table once admitted
  int64_t last_run = -1;        // the pass that last ran it (decode fairness)
  GenerationConfig generation;
  std::optional<at::Generator> generator;  // when sampling: its own, seeded from `generation`
  std::shared_ptr<const TokenCallback> on_event;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_length; }
};

// What one forward pass runs (LlamaForCausalLMImpl::forward_paged's arguments): the flat tokens and each
// sequence's part of them. All that tensor-parallel followers need (ragged_plan_broadcast.h).
struct RaggedPass {
  std::vector<int64_t> tokens;
  std::vector<models::PagedSequence> sequences;
};

// A pass with the request each sequence belongs to.
struct RaggedPlan {
  RaggedPass pass;
  std::vector<RaggedRequest*> requests;  // parallel to pass.sequences
  int64_t prompt_tokens = 0;             // of the pass's tokens, those from prompts
  bool empty() const { return pass.sequences.empty(); }
};

class RaggedScheduler {
 public:
  RaggedScheduler(int64_t max_tokens, int64_t max_sequences, int64_t block_size, KVBlockAllocator& allocator);
  // The blocks a request of `positions` cached positions takes.
  int64_t blocks_for(int64_t positions) const { return (positions + block_size_ - 1) / block_size_; }
  void add(std::unique_ptr<RaggedRequest> request);
  // Takes a request out (waiting or running), its blocks back on the free list; nullptr for an unknown id.
  std::unique_ptr<RaggedRequest> remove(int64_t id);
  // The next pass; each scheduled request's `cached` already counts its tokens in the pass.
  RaggedPlan schedule();
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }

 private:
  void add_to_plan(RaggedRequest& r, int64_t length, RaggedPlan& plan);

  int64_t max_tokens_, max_sequences_, block_size_;
  KVBlockAllocator& allocator_;
  std::deque<std::unique_ptr<RaggedRequest>> waiting_;
  std::vector<std::unique_ptr<RaggedRequest>> running_;  // admission order
  int64_t passes_ = 0;
};

}  // namespace deepspeed::inference
