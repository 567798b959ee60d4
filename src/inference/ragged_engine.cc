// RaggedEngine (deepspeed/inference/ragged_engine.h): submissions and cancellations queue under a mutex; step() takes
// them over, asks the scheduler (ragged_scheduler.h) for a pass, runs it through the model's blocked cache
// (LlamaForCausalLMImpl::forward_paged), chooses each finished row's token as generate does (logits_processing.h),
// and fires the events only after the bookkeeping, outside the lock, so a callback may submit or cancel.
#include "deepspeed/inference/ragged_engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "deepspeed/inference/logits_processing.h"
#include "inference/kv_block_allocator.h"
#include "inference/ragged_plan_broadcast.h"
#include "inference/ragged_scheduler.h"

namespace deepspeed::inference {
namespace {

struct PendingEvent {
  std::shared_ptr<const TokenCallback> on_event;
  TokenEvent event;
};

int group_size_of(const models::LlamaForCausalLM& model) {
  const auto& group = model->config().tensor_parallel;
  return group.is_member() ? group.size() : 1;
}

// The cache's blocks: `size` of them ("allocate"), or what the memory left after keeping `size` bytes holds
// ("reserve"), capped by what max_tracked_sequences sequences of max_context positions could use. Under tensor
// parallelism the smallest over the ranks, so every rank's cache has the same blocks.
int64_t ragged_cache_blocks(const RaggedEngineConfig& c, models::LlamaForCausalLMImpl& model,
                            const c10::Device& device) {
  if (c.memory_mode == "allocate") return c.memory_size;
  const int64_t per_block = model.paged_kv_block_bytes(c.kv_block_size);
  const int64_t available = device.is_cpu()
                                ? accelerator::host_memory_stats().available_bytes
                                : accelerator::get_accelerator().memory_stats(device.index()).available_bytes;
  const int64_t cap = c.max_tracked_sequences * ((c.max_context + c.kv_block_size - 1) / c.kv_block_size);
  int64_t blocks = std::min(cap, (available - c.memory_size) / per_block);
  comm::ProcessGroup group = model.config().tensor_parallel;  // a handle: copies share the group
  if (group.is_member() && group.size() > 1) {
    const at::Tensor t = at::tensor(std::vector<int64_t>{blocks}, at::kLong).to(device);
    group.all_reduce(t, comm::ReduceOp::kMin);
    blocks = t.cpu().item<int64_t>();
  }
  DS_CHECK_T(ConfigError, blocks >= 1, "serving config: state_manager.memory_config.size ", c.memory_size,
             " bytes kept leaves no room for the KV cache (", available, " bytes available on ", device.str(),
             ", one block of ", c.kv_block_size, " positions takes ", per_block,
             " bytes); lower it, or use mode \"allocate\"");
  return blocks;
}

bool is_stop(const GenerationConfig& g, int64_t token) {
  return std::find(g.eos_token_id.begin(), g.eos_token_id.end(), token) != g.eos_token_id.end();
}

}  // namespace

struct RaggedEngine::State {
  models::LlamaForCausalLM model;
  RaggedEngineConfig config;
  c10::Device device = c10::Device(c10::kCPU);
  comm::ProcessGroup group;  // tensor parallelism's, or null
  bool leader = true;
  bool followers_stopped = false;
  models::LlamaPagedKVCache cache;
  int64_t cache_blocks = 0;  // fixed at construction: submit may read it from any thread
  std::unique_ptr<KVBlockAllocator> allocator;
  std::unique_ptr<RaggedScheduler> scheduler;

  // Shared with submit / cancel / metrics; everything above is the stepping thread's.
  mutable std::mutex mutex;
  std::deque<std::unique_ptr<RaggedRequest>> incoming;
  std::vector<int64_t> cancels;
  int64_t next_id = 1;
  int64_t tracked = 0;  // submitted and not yet finished or cancelled
  EngineMetrics metrics;

  State(models::LlamaForCausalLM m, RaggedEngineConfig c) : model(std::move(m)), config(std::move(c)) {}
  void take_submissions(std::vector<PendingEvent>& events);
  void choose_tokens(const RaggedPlan& plan, const at::Tensor& logits, std::vector<PendingEvent>& events);
  void finish(RaggedRequest& r, FinishReason why, int64_t token, std::vector<PendingEvent>& events);
  void check_leader(const char* what) const;
};

void RaggedEngine::State::check_leader(const char* what) const {
  if (!leader)
    throw std::logic_error(std::string("RaggedEngine: ") + what + " on tensor-parallel rank " +
                           std::to_string(group.rank()) +
                           "; only the group's rank 0 takes requests (the others call "
                           "follow())");
}

RaggedEngine::RaggedEngine(models::LlamaForCausalLM model, RaggedEngineConfig config)
    : state_(std::make_unique<State>(std::move(model), std::move(config))) {
  State& s = *state_;
  const RaggedEngineConfig& c = s.config;
  DS_CHECK_T(ConfigError, group_size_of(s.model) == c.tp_size, "serving config: tensor_parallel.tp_size is ", c.tp_size,
             " but the model is split over ", group_size_of(s.model),
             " ranks (build it over deepspeed::tp::tensor_parallel_groups(tp_size))");
  DS_CHECK_T(ConfigError, c.kv_block_size >= 1 && c.max_ragged_batch_size >= 1 && c.max_ragged_sequence_count >= 1,
             "serving config: kv_block_size, max_ragged_batch_size and max_ragged_sequence_count must be >= 1");
  DS_CHECK_T(ConfigError, c.memory_mode == "reserve" || c.memory_mode == "allocate",
             "serving config: state_manager.memory_config.mode must be \"reserve\" or \"allocate\", got \"",
             detail::printable(c.memory_mode), "\"");
  s.group = s.model->config().tensor_parallel;
  s.leader = !s.group.is_member() || s.group.rank() == 0;
  s.model->to(accelerator::get_accelerator().device(), c.dtype);
  s.model->eval();
  s.model->inject_kernels();  // fused q/k/v and gate/up, packed CPU weights: init_inference's kernel injection
  s.device = s.model->parameters().front().device();
  const int64_t blocks = ragged_cache_blocks(c, *s.model, s.device);
  s.cache = s.model->make_paged_kv_cache(blocks, c.kv_block_size);
  s.cache_blocks = blocks;
  s.allocator = std::make_unique<KVBlockAllocator>(blocks);
  s.scheduler = std::make_unique<RaggedScheduler>(c.max_ragged_batch_size, c.max_ragged_sequence_count, c.kv_block_size,
                                                  *s.allocator);
  s.metrics.kv_blocks_total = blocks;
}

RaggedEngine::~RaggedEngine() {
  // Followers wait in follow() for rank 0's word; an engine dropped without stop_followers() still releases them.
  if (state_ && state_->leader && state_->group.is_member() && state_->group.size() > 1 && !state_->followers_stopped) {
    try {
      stop_followers();
    } catch (const std::exception&) {  // a destructor must not throw; the followers then time out
    }
  }
}

const RaggedEngineConfig& RaggedEngine::config() const { return state_->config; }

int64_t RaggedEngine::submit(ServeRequest request, std::function<void(const TokenEvent&)> on_event) {
  State& s = *state_;
  s.check_leader("submit");
  const auto n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) throw std::invalid_argument("RaggedEngine: the prompt is empty");
  const int64_t vocab = s.model->config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = request.prompt[static_cast<size_t>(i)];
    if (t < 0 || t >= vocab)
      throw std::invalid_argument("RaggedEngine: prompt token " + std::to_string(i) + " is " + std::to_string(t) +
                                  ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  request.generation.check("generation config");
  const int64_t limit = request.generation.new_token_limit(n);
  if (n + limit > s.config.max_context)
    throw std::invalid_argument("RaggedEngine: a prompt of " + std::to_string(n) + " tokens plus up to " +
                                std::to_string(limit) + " new ones exceeds max_context " +
                                std::to_string(s.config.max_context));
  // The last new token is never run, so its position is never cached.
  const int64_t positions = n + limit - 1;
  const auto& window = s.model->config().sliding_window;
  if (window && positions > *window)
    throw std::invalid_argument("RaggedEngine: a prompt of " + std::to_string(n) + " tokens plus up to " +
                                std::to_string(limit) + " new ones exceeds the model's sliding_window " +
                                std::to_string(*window) + " (sliding-window attention is not built)");
  auto r = std::make_unique<RaggedRequest>();
  r->blocks_needed = s.scheduler->blocks_for(positions);
  if (r->blocks_needed > s.cache_blocks)
    throw std::invalid_argument("RaggedEngine: a prompt of " + std::to_string(n) + " tokens plus up to " +
                                std::to_string(limit) + " new ones needs " + std::to_string(r->blocks_needed) +
                                " KV blocks, the cache holds " + std::to_string(s.cache_blocks));
  r->tokens = std::move(request.prompt);
  r->prompt_length = n;
  r->new_token_limit = limit;
  if (request.generation.do_sample) r->generator = make_generator(request.generation, s.device);
  r->generation = std::move(request.generation);
  if (on_event) r->on_event = std::make_shared<const TokenCallback>(std::move(on_event));
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.tracked >= s.config.max_tracked_sequences)
    throw std::invalid_argument("RaggedEngine: max_tracked_sequences (" +
                                std::to_string(s.config.max_tracked_sequences) +
                                ") requests are already held; retry later");
  r->id = s.next_id++;
  ++s.tracked;
  const int64_t id = r->id;
  s.incoming.push_back(std::move(r));
  return id;
}

void RaggedEngine::cancel(int64_t request_id) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->cancels.push_back(request_id);
}

// Under the lock: new requests to the scheduler, then the cancellations (of waiting or running requests alike).
void RaggedEngine::State::take_submissions(std::vector<PendingEvent>& events) {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& r : incoming) scheduler->add(std::move(r));
  incoming.clear();
  for (const int64_t id : cancels) {
    std::unique_ptr<RaggedRequest> r = scheduler->remove(id);
    if (!r) continue;  // unknown, finished, or cancelled twice
    --tracked;
    events.push_back({r->on_event, {id, -1, FinishReason::kCancelled}});
  }
  cancels.clear();
}

void RaggedEngine::State::finish(RaggedRequest& r, FinishReason why, int64_t token, std::vector<PendingEvent>& events) {
  events.push_back({r.on_event, {r.id, token, why}});
  if (why == FinishReason::kNone) return;
  scheduler->remove(r.id);  // frees its blocks; `r` is gone after this
  std::lock_guard<std::mutex> lock(mutex);
  --tracked;
  ++metrics.requests_finished;
}

// Each row of `logits` belongs to the plan's next request with wants_logits: its next token, chosen as generate
// chooses it (repetition penalty over prompt and generated ids, then sampling settings, with its own generator).
void RaggedEngine::State::choose_tokens(const RaggedPlan& plan, const at::Tensor& logits,
                                        std::vector<PendingEvent>& events) {
  std::vector<RaggedRequest*> rows;
  for (size_t i = 0; i < plan.requests.size(); ++i)
    if (plan.pass.sequences[i].wants_logits) rows.push_back(plan.requests[i]);
  DS_ASSERT(logits.size(0) == static_cast<int64_t>(rows.size()), "logits rows ", logits.size(0), " for ", rows.size());
  // Greedy rows without a penalty need only the argmax: one call and one copy to the host for all of them.
  const at::Tensor argmax = logits.argmax(-1).cpu();
  std::vector<int64_t> chosen(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const RaggedRequest& r = *rows[i];
    const auto row = static_cast<int64_t>(i);
    if (!r.generation.do_sample && r.generation.repetition_penalty == 1.0) {
      chosen[i] = argmax[row].item<int64_t>();
      continue;
    }
    const at::Tensor ids = at::tensor(r.tokens, at::kLong).view({1, -1}).to(device);
    const at::Tensor scores = process_logits(logits.narrow(0, row, 1), ids, r.generation);
    at::Generator* gen = r.generator ? &*rows[i]->generator : nullptr;
    chosen[i] = next_tokens(scores, r.generation, gen).cpu().item<int64_t>();
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    RaggedRequest& r = *rows[i];
    r.tokens.push_back(chosen[i]);
    FinishReason why = FinishReason::kNone;
    if (is_stop(r.generation, chosen[i]))
      why = FinishReason::kStop;
    else if (r.generated() >= r.new_token_limit)
      why = FinishReason::kLength;
    finish(r, why, chosen[i], events);
  }
}

bool RaggedEngine::step() {
  State& s = *state_;
  s.check_leader("step");
  std::vector<PendingEvent> events;
  s.take_submissions(events);
  const RaggedPlan plan = s.scheduler->schedule();
  bool ran = false;
  if (!plan.empty()) {
    const auto start = std::chrono::steady_clock::now();
    if (s.group.is_member() && s.group.size() > 1) send_pass(s.group, &plan.pass, s.device);
    const at::Tensor tokens = at::tensor(plan.pass.tokens, at::kLong).to(s.device);
    const at::Tensor logits = s.model->forward_paged(tokens, plan.pass.sequences, s.cache);
    s.choose_tokens(plan, logits, events);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.metrics.forward_passes += 1;
    s.metrics.busy_seconds += seconds;
    s.metrics.prompt_tokens += plan.prompt_tokens;
    s.metrics.generated_tokens += logits.size(0);
    ran = true;
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.metrics.batch_tokens = static_cast<int64_t>(plan.pass.tokens.size());
    s.metrics.batch_sequences = static_cast<int64_t>(plan.pass.sequences.size());
    s.metrics.waiting = s.scheduler->waiting();
    s.metrics.running = s.scheduler->running();
    s.metrics.kv_blocks_used = s.allocator->used();
  }
  // Every callback runs even when one throws; the first exception then leaves step().
  std::exception_ptr first;
  for (const PendingEvent& e : events) {
    if (!e.on_event) continue;
    try {
      (*e.on_event)(e.event);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  return ran;
}

EngineMetrics RaggedEngine::metrics() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  EngineMetrics m = state_->metrics;
  m.waiting += static_cast<int64_t>(state_->incoming.size());
  return m;
}

void RaggedEngine::follow() {
  State& s = *state_;
  if (s.leader) {
    if (s.group.is_member() && s.group.size() > 1)
      throw std::logic_error("RaggedEngine: follow() on tensor-parallel rank 0, which schedules (call step())");
    return;  // one rank: nobody to follow
  }
  RaggedPass pass;
  while (receive_pass(s.group, pass, s.device))
    s.model->forward_paged(at::tensor(pass.tokens, at::kLong).to(s.device), pass.sequences, s.cache);
}

void RaggedEngine::stop_followers() {
  State& s = *state_;
  s.check_leader("stop_followers");
  if (!s.group.is_member() || s.group.size() == 1 || s.followers_stopped) return;
  s.followers_stopped = true;
  send_pass(s.group, nullptr, s.device);
}

}  // namespace deepspeed::inference
