// CompletionService (completion_service.h).
#include "serving/completion_service.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "serving/openai_response.h"

namespace deepspeed::serving {
namespace {

// How long a stream may stay silent (a request waiting for KV blocks) before a comment line is sent: writing is
// how a client that went away is noticed, so its request is cancelled even before its first token.
constexpr auto kKeepAlive = std::chrono::milliseconds(1000);

std::string count_of(int64_t n, const char* what) { return std::to_string(n) + " " + what; }

}  // namespace

ChatRenderer make_chat_renderer(std::shared_ptr<const ChatTemplate> chat_template) {
  return [chat_template](const std::vector<ChatMessage>& messages) {
    nlohmann::json list = nlohmann::json::array();
    for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
    return chat_template->render(list.dump(), /*add_generation_prompt=*/true);
  };
}

CompletionService::CompletionService(EngineLoop& loop, const data::Tokenizer& tokenizer, ChatRenderer render_chat,
                                     ServiceOptions options, RequestCounters& counters)
    : loop_(loop),
      tokenizer_(tokenizer),
      render_chat_(std::move(render_chat)),
      options_(std::move(options)),
      counters_(counters) {
  started_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<int64_t> CompletionService::prompt_tokens(const CompletionRequest& r) const {
  if (r.prompt_is_tokens) {
    for (const int64_t id : r.prompt_tokens) {
      if (id < 0 || id >= tokenizer_.vocab_size()) {
        throw RequestError(400,
                           "prompt token id " + std::to_string(id) + " is outside the vocabulary (0 .. " +
                               std::to_string(tokenizer_.vocab_size() - 1) + ")",
                           "prompt");
      }
    }
    return r.prompt_tokens;
  }
  const char* param = r.chat ? "messages" : "prompt";
  try {
    if (!r.chat) return tokenizer_.encode(r.prompt_text, /*add_special_tokens=*/true);
    if (!render_chat_) throw RequestError(400, options_.chat_template_missing, "messages");
    // The template writes the special tokens itself (a BOS among them), as vLLM and transformers' apply_chat_template
    // tokenize it.
    return tokenizer_.encode(render_chat_(r.messages), /*add_special_tokens=*/false);
  } catch (const RequestError&) {
    throw;
  } catch (const std::exception& e) {
    throw RequestError(400, detail::printable(e.what()), param);
  }
}

inference::GenerationConfig CompletionService::generation(const CompletionRequest& r, int64_t prompt_length) const {
  const int64_t context = options_.context_length;
  const char* input = r.chat ? "messages" : "prompt";
  if (prompt_length >= context) {
    throw RequestError(400,
                       "the prompt is " + count_of(prompt_length, "tokens") + "; the model's context is " +
                           count_of(context, "tokens") + ", with room for at least one new token",
                       input);
  }
  // Without max_tokens: OpenAI's 16 for completions, the rest of the context for chat (as vLLM does).
  int64_t max_tokens = r.max_tokens.value_or(r.chat ? context - prompt_length : options_.default_max_tokens);
  if (!r.max_tokens) max_tokens = std::min(max_tokens, context - prompt_length);
  if (prompt_length + max_tokens > context) {
    throw RequestError(400,
                       "max_tokens " + std::to_string(max_tokens) + " plus the prompt's " +
                           count_of(prompt_length, "tokens") + " exceed the model's context of " +
                           count_of(context, "tokens"),
                       r.max_tokens_field);
  }
  inference::GenerationConfig g = options_.generation;
  g.max_new_tokens = max_tokens;
  g.max_length.reset();
  if (r.temperature) {
    g.do_sample = *r.temperature > 0;
    if (g.do_sample) g.temperature = *r.temperature;
  }
  if (r.top_p) {
    g.top_p = *r.top_p;
    if (*r.top_p < 1 && !(r.temperature && *r.temperature == 0)) g.do_sample = true;
  }
  g.seed = r.seed;
  return g;
}

std::unique_ptr<ActiveRequest> CompletionService::start(bool chat, const std::string& body) {
  const CompletionRequest r = chat ? parse_chat_request(body) : parse_completion_request(body);
  if (r.model != options_.model_name) {
    throw RequestError(404,
                       "model '" + detail::printable(r.model) + "' is not served here; this server serves '" +
                           options_.model_name + "'",
                       "model", "invalid_request_error", "model_not_found");
  }
  std::vector<int64_t> tokens = prompt_tokens(r);
  const auto prompt_length = static_cast<int64_t>(tokens.size());
  inference::ServeRequest request{std::move(tokens), generation(r, prompt_length)};
  if (loop_.in_flight() >= options_.max_in_flight) {
    throw RequestError(
        429, "the server holds " + count_of(options_.max_in_flight, "requests") + " already (--max_queue); retry later",
        "", "server_busy");
  }
  std::shared_ptr<RequestStream> stream;
  try {
    stream = loop_.submit(std::move(request));
  } catch (const RequestError&) {
    throw;
  } catch (const std::exception& e) {
    // The engine's refusal: its max_tracked_sequences reached (the check above raced with other submits), else a
    // request whose length could never fit (the cache's blocks, a sliding window).
    if (loop_.in_flight() >= options_.max_in_flight) {
      throw RequestError(429, detail::printable(e.what()) + "; retry later", "", "server_busy");
    }
    throw RequestError(400, detail::printable(e.what()), r.max_tokens_field);
  }
  return std::make_unique<ActiveRequest>(loop_, std::move(stream), tokenizer_, r,
                                         new_response_head(chat, options_.model_name), prompt_length);
}

std::string CompletionService::complete(ActiveRequest& request) {
  std::string text;
  while (!request.done()) request.next(&text, kKeepAlive);
  return completion_json(request.head(), text, request.finish_reason(), request.usage());
}

bool CompletionService::stream(ActiveRequest& request, const std::function<bool(const std::string&)>& write) {
  const ResponseHead& head = request.head();
  bool ok = !head.chat || write(sse_event(chunk_json(head, "", "", /*role=*/true)));
  try {
    while (ok && !request.done()) {
      std::string text;
      if (!request.next(&text, kKeepAlive)) {
        ok = write(": keep-alive\n\n");  // a comment line: SSE clients skip it
      } else if (!text.empty()) {
        ok = write(sse_event(chunk_json(head, text, "")));
      }
    }
    if (ok) ok = write(sse_event(chunk_json(head, "", request.finish_reason())));
    if (ok && request.include_usage()) ok = write(sse_event(usage_chunk_json(head, request.usage())));
  } catch (const RequestError& e) {
    ok = ok && write(sse_event(error_json(e)));
  }
  if (ok) ok = write(kSseDone);
  if (!ok) counters_.count_disconnect();
  return ok;
}

std::string CompletionService::models() const { return models_json(options_.model_name, started_); }

}  // namespace deepspeed::serving
