// OpenAI response and chunk JSON (openai_response.h).
#include "serving/openai_response.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

namespace deepspeed::serving {
namespace {

using OrderedJson = nlohmann::ordered_json;  // keys in OpenAI's order: id, object, created, ...

std::string dump(const OrderedJson& j) { return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace); }

OrderedJson usage_of(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

OrderedJson head_of(const ResponseHead& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

OrderedJson finish_of(const std::string& reason) { return reason.empty() ? OrderedJson(nullptr) : OrderedJson(reason); }

}  // namespace

ResponseHead new_response_head(bool chat, const std::string& model) {
  // Ids unique across restarts too (a client may log them): a random prefix per process, then a counter.
  static const uint64_t kProcess = std::random_device()() * 0x100000000ull + std::random_device()();
  static std::atomic<uint64_t> counter{0};
  char id[48];
  std::snprintf(id, sizeof(id), "%s-%016llx%08llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(kProcess), static_cast<unsigned long long>(counter++));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {id, std::chrono::duration_cast<std::chrono::seconds>(now).count(), model, chat};
}

std::string completion_json(const ResponseHead& head, const std::string& text, const std::string& finish_reason,
                            const Usage& usage) {
  OrderedJson choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_of(finish_reason)}};
  if (head.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  OrderedJson j = head_of(head, head.chat ? "chat.completion" : "text_completion");
  j["choices"] = OrderedJson::array({choice});
  j["usage"] = usage_of(usage);
  return dump(j);
}

std::string chunk_json(const ResponseHead& head, const std::string& text, const std::string& finish_reason, bool role) {
  OrderedJson choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_of(finish_reason)}};
  if (head.chat) {
    OrderedJson delta = OrderedJson::object();
    if (role) delta["role"] = "assistant";
    if (role || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  OrderedJson j = head_of(head, head.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = OrderedJson::array({choice});
  return dump(j);
}

std::string usage_chunk_json(const ResponseHead& head, const Usage& usage) {
  OrderedJson j = head_of(head, head.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = OrderedJson::array();
  j["usage"] = usage_of(usage);
  return dump(j);
}

std::string error_json(const RequestError& error) {
  const auto or_null = [](const std::string& s) { return s.empty() ? OrderedJson(nullptr) : OrderedJson(s); };
  return dump({{"error",
                {{"message", error.what()},
                 {"type", error.type()},
                 {"param", or_null(error.param())},
                 {"code", or_null(error.code())}}}});
}

std::string models_json(const std::string& model, int64_t created) {
  const OrderedJson entry = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "deepspeed-cpp"}};
  return dump({{"object", "list"}, {"data", OrderedJson::array({entry})}});
}

std::string sse_event(const std::string& data) { return "data: " + data + "\n\n"; }

}  // namespace deepspeed::serving
