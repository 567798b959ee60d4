// What the OpenAI endpoints do, without the HTTP: a request body becomes token ids (the prompt through the model's
// tokenizer, or the chat messages through its chat template first) and a GenerationConfig (the model folder's
// generation_config.json under the request's max_tokens, temperature, top_p and seed), is checked against the
// context, submitted to the engine loop, and answered as one JSON document or as server-sent events.
//
//   CompletionService service(loop, tokenizer, render_chat, options);
//   auto request = service.start(/*chat=*/false, body);             // RequestError: a 4xx to send back
//   std::string json = service.complete(*request);                  // or: service.stream(*request, write)
//
// Thread-safety: every method may run on many handler threads at once (the service holds no per-request state).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/data/tokenizer.h"
#include "deepspeed/inference/generation_config.h"
#include "deepspeed/serving/chat_template.h"
#include "serving/active_request.h"
#include "serving/engine_loop.h"
#include "serving/serving_metrics.h"

namespace deepspeed::serving {

// The model folder's chat template applied to messages with the generation prompt; throws on a template error.
using ChatRenderer = std::function<std::string(const std::vector<ChatMessage>&)>;
// The renderer of a model folder's ChatTemplate: the messages as JSON, the assistant's opening added.
ChatRenderer make_chat_renderer(std::shared_ptr<const ChatTemplate> chat_template);

struct ServiceOptions {
  std::string model_name;                  // what /v1/models lists and requests must name
  std::string chat_template_missing;       // why chat is refused when there is no renderer
  int64_t context_length = 0;              // prompt plus new tokens, at most
  int64_t max_in_flight = 0;               // more requests at once get 429
  int64_t default_max_tokens = 16;         // completions without max_tokens (OpenAI's default)
  inference::GenerationConfig generation;  // the folder's defaults
};

class CompletionService {
 public:
  CompletionService(EngineLoop& loop, const data::Tokenizer& tokenizer, ChatRenderer render_chat,
                    ServiceOptions options, RequestCounters& counters);

  // Parses, checks and submits the body of /v1/completions (chat false) or /v1/chat/completions.
  std::unique_ptr<ActiveRequest> start(bool chat, const std::string& body);
  // Waits for the end and returns the response JSON.
  std::string complete(ActiveRequest& request);
  // Writes the events of a streamed request through `write` ("data: ...\n\n" each, "data: [DONE]\n\n" last); an
  // error after the first event is sent as an error event. False when `write` failed (the client went away; the
  // request is cancelled when it is destroyed).
  bool stream(ActiveRequest& request, const std::function<bool(const std::string&)>& write);
  std::string models() const;

 private:
  std::vector<int64_t> prompt_tokens(const CompletionRequest& r) const;
  inference::GenerationConfig generation(const CompletionRequest& r, int64_t prompt_length) const;

  EngineLoop& loop_;
  const data::Tokenizer& tokenizer_;
  ChatRenderer render_chat_;
  ServiceOptions options_;
  RequestCounters& counters_;
  int64_t started_ = 0;  // when the server started: /v1/models' created
};

}  // namespace deepspeed::serving
