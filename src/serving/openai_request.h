// The bodies of OpenAI's POST /v1/completions and /v1/chat/completions, parsed and checked field by field before
// anything reaches the engine. Each refusal is a RequestError carrying what OpenAI's error JSON needs: the HTTP
// status, a one-line message and the field (`param`) at fault.
//
// Accepted: model, prompt (a string or token ids; a list holding one of them; a list of several prompts is refused
// by name), messages (chat: role and content, content a string or text parts), max_tokens (chat also
// max_completion_tokens), temperature, top_p, seed, stop (a string or up to 4), stream, stream_options.include_usage,
// user (ignored), and the fields whose other values this server does not build when they hold their default (n 1,
// best_of 1, echo false, logprobs null or false, presence/frequency_penalty 0, logit_bias {}, suffix null,
// response_format {"type": "text"}). Any other value of those, and any unknown field, is refused by name.
// What needs the model (a prompt past the context, token ids past the vocabulary, max_tokens past the context) is
// checked later, by completion_service.
//
// Plain functions over plain values: safe on any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::serving {

// A request the server refuses, as OpenAI reports it: {"error": {"message", "type", "param", "code"}}.
class RequestError : public Error {
 public:
  RequestError(int status, const std::string& message, std::string param = "",
               std::string type = "invalid_request_error", std::string code = "")
      : Error(message), status_(status), param_(std::move(param)), type_(std::move(type)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }  // empty: null
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }  // empty: null

 private:
  int status_;
  std::string param_, type_, code_;
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;  // text parts joined
};

struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::string prompt_text;             // completions: the prompt as text, unless prompt_is_tokens
  std::vector<int64_t> prompt_tokens;  // completions: the prompt as token ids
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;            // chat
  std::optional<int64_t> max_tokens;            // >= 1
  std::string max_tokens_field = "max_tokens";  // or chat's max_completion_tokens: what errors name
  std::optional<double> temperature;            // in [0, 2]; 0 is greedy
  std::optional<double> top_p;                  // in (0, 1]
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // non-empty strings, at most 4
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
};

// RequestError (400, param the field) for a body that is not a JSON object or any field above out of place.
CompletionRequest parse_completion_request(const std::string& body);
CompletionRequest parse_chat_request(const std::string& body);

}  // namespace deepspeed::serving
