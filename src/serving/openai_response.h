// The JSON the server answers with, in OpenAI's shapes: a whole completion or chat completion (id, object, created,
// model, choices, usage), the chunks of a streamed one framed as server-sent events ("data: {...}\n\n", then
// "data: [DONE]\n\n"), the model list, and the error object {"error": {message, type, param, code}}.
// Text that is not UTF-8 (never produced by the detokenizer, but a client's echo could be) is written with U+FFFD.
//
// Plain functions: safe on any thread.
#pragma once

#include <cstdint>
#include <string>

#include "serving/openai_request.h"

namespace deepspeed::serving {

// What every response and chunk of one request repeats.
struct ResponseHead {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool chat = false;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// A fresh head for a request: a unique id and the time now.
ResponseHead new_response_head(bool chat, const std::string& model);

// The whole response of a request that was not streamed; finish_reason "stop" or "length".
std::string completion_json(const ResponseHead& head, const std::string& text, const std::string& finish_reason,
                            const Usage& usage);

// One streamed chunk: `text` new text; chat chunks carry it as delta.content, and the first one (role) also the
// assistant role. finish_reason empty: null (the request continues).
std::string chunk_json(const ResponseHead& head, const std::string& text, const std::string& finish_reason,
                       bool role = false);
// The chunk stream_options.include_usage asks for after the last one: no choices, the usage.
std::string usage_chunk_json(const ResponseHead& head, const Usage& usage);

std::string error_json(const RequestError& error);
std::string models_json(const std::string& model, int64_t created);

// Server-sent event framing.
std::string sse_event(const std::string& data);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace deepspeed::serving
