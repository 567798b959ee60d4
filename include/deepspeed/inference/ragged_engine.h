// FastGen-style serving for the Llama family (DeepSpeed inference v2's `build_hf_engine` /
// RaggedInferenceEngineConfig): many requests decode at once over a blocked (paged) KV cache.
//
// - Blocked KV cache: every layer's keys and values live in fixed-size blocks of `kv_block_size` positions, taken
//   from a free list as a sequence grows and given back when it ends; the number of blocks comes from the config's
//   memory budget (state_manager.memory_config).
// - Continuous batching: requests join and leave between forward passes; each pass runs one ragged batch (each
//   sequence its own length, no padding).
// - Dynamic SplitFuse: a pass holds at most `max_ragged_batch_size` tokens. Running sequences' decode tokens come
//   first; the rest of the budget is filled with prompt chunks (a long prompt is split over several passes).
// - A request is admitted (first come, first served) once the free list holds the blocks of its whole length, prompt
//   plus new-token limit; until then it waits in the queue, and it never fails the engine. Taking them all at
//   admission means a running request never runs out of blocks: no preemption, no deadlock; the price is that one
//   that meets a stop token early held blocks it never wrote. One that could never fit (prompt plus max_new_tokens
//   over max_context, or more blocks than the cache has) is refused at submit.
// - Each request's tokens are those transformers' `generate` gives it alone (greedy, repetition penalty, sampling
//   with its own seeded generator, stop tokens), however it is batched: tests/inference/ragged_engine_test.cc.
//
//   auto engine = RaggedEngine(std::move(model), RaggedEngineConfig::from_json(text, "ds_serve.json"));
//   int64_t id = engine.submit({prompt_ids, generation}, [](const TokenEvent& e) { ... });   // any thread
//   while (engine.step()) {}                                                                  // one thread
//
// Thread-safety: submit, cancel and metrics may be called from any thread; step (or run/stop) from one thread only.
// Callbacks run on the stepping thread and must not block (hand the token to a queue).
// Tensor parallelism: every rank of the model's tensor-parallel group constructs the engine; rank 0 of the group
// takes submissions and schedules, and each step sends its plan (tokens, positions, block tables) to the others, so
// only rank 0's callbacks fire. The other ranks call `follow()` until rank 0 calls stop_followers() (its destructor
// does, when it was not called).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/inference/generation_config.h"
#include "deepspeed/models/llama.h"

namespace deepspeed::inference {

// DeepSpeed's RaggedInferenceEngineConfig names where they exist:
//   {"tensor_parallel": {"tp_size": 1},
//    "state_manager": {"max_tracked_sequences": 2048, "max_ragged_batch_size": 768,
//                      "max_ragged_sequence_count": 512, "max_context": 8192,
//                      "memory_config": {"mode": "reserve" | "allocate", "size": N}},
//    "kv_block_size": 64, "dtype": "fp32"}
// (DeepSpeed's aliases "tp" and "manager" too; "quantization": {"quantization_mode": null} and
// "state_manager.offload": false are accepted as the off values they are. kv_block_size and dtype are ours: DeepSpeed
// takes the block size from its model implementation.)
// memory_config: "allocate" -- `size` KV blocks; "reserve" -- all memory but `size` bytes (the device's free memory,
// or on CPU MemAvailable) for the cache, capped by what max_tracked_sequences x max_context could use.
// Unknown keys and keys for what is not built (offload) are refused by name (ConfigError).
struct RaggedEngineConfig {
  int tp_size = 1;
  int64_t max_tracked_sequences = 2048;     // requests held at once (running + waiting for blocks)
  int64_t max_ragged_batch_size = 768;      // tokens per forward pass (the SplitFuse budget)
  int64_t max_ragged_sequence_count = 512;  // sequences per forward pass
  int64_t max_context = 8192;               // prompt + generated tokens of one sequence
  std::string memory_mode = "reserve";      // "reserve" or "allocate"
  int64_t memory_size = 1000000000;         // bytes to leave ("reserve") or blocks ("allocate")
  int64_t kv_block_size = 64;
  c10::ScalarType dtype = c10::ScalarType::Float;

  static RaggedEngineConfig from_json(const std::string& text, const std::string& source_name = "serving config");
  static RaggedEngineConfig from_file(const std::string& path);
};

struct ServeRequest {
  std::vector<int64_t> prompt;  // token ids, non-empty
  GenerationConfig generation;  // max_new_tokens, sampling, eos ids, seed (each request its own generator)
};

enum class FinishReason { kNone, kStop, kLength, kCancelled };

// One new token of a request (finish == kNone while it continues), or its end without a token (token == -1, after
// cancel).
struct TokenEvent {
  int64_t request_id = 0;
  int64_t token = -1;
  FinishReason finish = FinishReason::kNone;
};

struct EngineMetrics {
  int64_t waiting = 0;  // submitted, not yet scheduled (queue length)
  int64_t running = 0;  // holding KV blocks
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t prompt_tokens = 0;  // totals since start
  int64_t generated_tokens = 0;
  int64_t requests_finished = 0;
  int64_t forward_passes = 0;
  double busy_seconds = 0;      // time spent in step()'s forward passes and token choice
  int64_t batch_tokens = 0;     // the last forward pass's tokens (<= max_ragged_batch_size) and sequences
  int64_t batch_sequences = 0;  // (<= max_ragged_sequence_count); 0 after a step that ran no pass
};

class RaggedEngine {
 public:
  // Casts the model to config.dtype on the accelerator, in evaluation mode, with its q/k/v and gate/up projections
  // fused and, on a CPU, its linear weights packed (LlamaForCausalLMImpl::inject_kernels), and allocates the cache.
  // ConfigError when the model's tensor-parallel group is not tp_size ranks, or "reserve" leaves no room for a block.
  // Under tensor parallelism collective: every rank of the group constructs it.
  RaggedEngine(models::LlamaForCausalLM model, RaggedEngineConfig config);
  ~RaggedEngine();
  RaggedEngine(const RaggedEngine&) = delete;
  RaggedEngine& operator=(const RaggedEngine&) = delete;

  // Queues a request; returns its id. Throws std::invalid_argument with a one-line reason (empty prompt, a token
  // outside the vocabulary, prompt plus max_new_tokens over max_context or over a Mistral model's sliding_window, more
  // blocks than the cache holds, max_tracked_sequences reached) and ConfigError for a bad GenerationConfig.
  // `on_event` (may be empty) receives each new token, the last one with its finish reason. Rank 0 only under tensor
  // parallelism (std::logic_error elsewhere).
  int64_t submit(ServeRequest request, std::function<void(const TokenEvent&)> on_event);
  // Ends a request at the next step (its blocks go back to the free list; one kCancelled event). Unknown or finished
  // ids are ignored.
  void cancel(int64_t request_id);
  // Takes the new submissions and cancellations, runs one forward pass over the scheduled ragged batch, chooses the
  // tokens, then fires the events (outside the lock: a callback may submit or cancel; if one throws, the others still
  // run and the first exception leaves step()). False when nothing was waiting or running (no pass ran).
  bool step();
  EngineMetrics metrics() const;
  const RaggedEngineConfig& config() const;
  // Tensor-parallel ranks other than the group's rank 0: run the plans rank 0 sends until it calls stop_followers()
  // (returns at once without tensor parallelism). stop_followers: rank 0, once its last step is done.
  void follow();
  void stop_followers();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace deepspeed::inference
