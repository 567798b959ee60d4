// Parsing and checking OpenAI request bodies (openai_request.h). One table per endpoint names the fields each accepts;
// a field missing from both the table and the inert list is unknown and refused, so a client never gets a reply that
// silently ignored what it asked for.
#include "serving/openai_request.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace deepspeed::serving {
namespace {

using Json = nlohmann::json;

RequestError bad(const std::string& param, const std::string& message) { return RequestError(400, message, param); }

std::string got(const Json& v) {
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return detail::printable(text);
}

const char* type_name(const Json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

int64_t integer_of(const Json& v, const std::string& param) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw bad(param, param + " is out of range, got " + got(v));
  }
  if (!v.is_number_integer()) throw bad(param, param + " must be an integer, got " + type_name(v) + " " + got(v));
  return v.get<int64_t>();
}

double number_of(const Json& v, const std::string& param) {
  if (!v.is_number()) throw bad(param, param + " must be a number, got " + type_name(v) + " " + got(v));
  return v.get<double>();
}

std::string string_of(const Json& v, const std::string& param) {
  if (!v.is_string()) throw bad(param, param + " must be a string, got " + type_name(v) + " " + got(v));
  return v.get<std::string>();
}

// Fields whose other values ask for what is not built here; at these values (or null) they change nothing.
bool inert_field(const std::string& key, const Json& v) {
  if (v.is_null()) return key != "model" && key != "prompt" && key != "messages";
  if (key == "n" || key == "best_of") return v == Json(1);
  if (key == "echo") return v == Json(false);
  if (key == "logprobs") return v == Json(false);
  if (key == "presence_penalty" || key == "frequency_penalty") return v.is_number() && v.get<double>() == 0.0;
  if (key == "logit_bias") return v.is_object() && v.empty();
  if (key == "response_format") return v == Json{{"type", "text"}};
  return false;
}

const std::set<std::string>& unbuilt_fields() {
  static const std::set<std::string> kFields = {"n",
                                                "best_of",
                                                "echo",
                                                "logprobs",
                                                "suffix",
                                                "presence_penalty",
                                                "logit_bias",
                                                "frequency_penalty",
                                                "tools",
                                                "tool_choice",
                                                "functions",
                                                "function_call",
                                                "top_logprobs",
                                                "response_format"};
  return kFields;
}

std::vector<int64_t> token_list(const Json& v, const std::string& param) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.size(); ++i) ids.push_back(integer_of(v[i], param + "[" + std::to_string(i) + "]"));
  return ids;
}

// prompt: "text", [ids...], or a list of exactly one of them (the openai client sends lists as given).
void read_prompt(const Json& v, CompletionRequest& r) {
  const Json* p = &v;
  if (v.is_array() && !v.empty() && (v[0].is_string() || v[0].is_array())) {
    if (v.size() > 1) {
      throw bad("prompt", "a list of " + std::to_string(v.size()) +
                              " prompts is not supported: send one request per prompt (n and batched prompts are "
                              "not built)");
    }
    p = &v[0];
  }
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text.empty()) throw bad("prompt", "prompt is empty");
    return;
  }
  if (!p->is_array()) throw bad("prompt", std::string("prompt must be a string or token ids, got ") + type_name(*p));
  if (p->empty()) throw bad("prompt", "prompt is empty");
  r.prompt_tokens = token_list(*p, "prompt");
  r.prompt_is_tokens = true;
}

// content: a string, or parts [{"type": "text", "text": ...}] joined (images and audio are not built).
std::string message_content(const Json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw bad(param, param + " must be a string or a list of text parts, got " + type_name(v));
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part = param + "[" + std::to_string(i) + "]";
    if (!v[i].is_object() || v[i].value("type", Json()) != Json("text") || !v[i].contains("text")) {
      throw bad(part, part + " must be {\"type\": \"text\", \"text\": ...} (only text content is supported)");
    }
    text += string_of(v[i]["text"], part + ".text");
  }
  return text;
}

void read_messages(const Json& v, CompletionRequest& r) {
  if (!v.is_array() || v.empty()) throw bad("messages", "messages must be a non-empty list of messages");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!v[i].is_object()) throw bad(param, param + " must be an object with role and content");
    ChatMessage m;
    for (const auto& [key, value] : v[i].items()) {
      if (key == "role") {
        m.role = string_of(value, param + ".role");
        if (!kRoles.count(m.role))
          throw bad(param + ".role", param + ".role '" + detail::printable(m.role) +
                                         "' is not one of system, developer, user, assistant, tool");
      } else if (key == "content") {
        if (!value.is_null()) m.content = message_content(value, param + ".content");
      } else if (key != "name") {
        throw bad(param + "." + key, "unknown field " + param + "." + detail::printable(key));
      }
    }
    if (m.role.empty()) throw bad(param + ".role", param + " has no role");
    r.messages.push_back(std::move(m));
  }
}

void read_stop(const Json& v, CompletionRequest& r) {
  if (v.is_string()) {
    r.stop = {v.get<std::string>()};
  } else if (v.is_array()) {
    if (v.size() > 4) throw bad("stop", "stop holds " + std::to_string(v.size()) + " strings; at most 4 are allowed");
    for (size_t i = 0; i < v.size(); ++i) r.stop.push_back(string_of(v[i], "stop[" + std::to_string(i) + "]"));
  } else {
    throw bad("stop", std::string("stop must be a string or a list of strings, got ") + type_name(v));
  }
  for (const std::string& s : r.stop) {
    if (s.empty()) throw bad("stop", "stop strings must not be empty");
  }
}

void read_stream_options(const Json& v, CompletionRequest& r) {
  if (!v.is_object()) throw bad("stream_options", "stream_options must be an object");
  for (const auto& [key, value] : v.items()) {
    if (key != "include_usage")
      throw bad("stream_options." + key, "unknown field stream_options." + detail::printable(key));
    if (!value.is_boolean())
      throw bad("stream_options.include_usage", "stream_options.include_usage must be true or false");
    r.include_usage = value.get<bool>();
  }
}

void read_sampling(const std::string& key, const Json& v, CompletionRequest& r) {
  if (key == "max_tokens" || key == "max_completion_tokens") {
    if (r.max_tokens) throw bad(key, "give max_tokens or max_completion_tokens, not both");
    r.max_tokens = integer_of(v, key);
    r.max_tokens_field = key;
    if (*r.max_tokens < 1) throw bad(key, key + " must be at least 1, got " + std::to_string(*r.max_tokens));
  } else if (key == "temperature") {
    r.temperature = number_of(v, key);
    if (!(*r.temperature >= 0 && *r.temperature <= 2)) throw bad(key, "temperature must be in [0, 2], got " + got(v));
  } else if (key == "top_p") {
    r.top_p = number_of(v, key);
    if (!(*r.top_p > 0 && *r.top_p <= 1)) throw bad(key, "top_p must be in (0, 1], got " + got(v));
  } else {  // seed
    const int64_t seed = integer_of(v, key);
    r.seed = static_cast<uint64_t>(seed);
  }
}

bool known_field(const std::string& key, bool chat) {
  static const std::set<std::string> kBoth = {"model", "max_tokens", "temperature",    "top_p", "seed",
                                              "stop",  "stream",     "stream_options", "user"};
  return kBoth.count(key) || key == (chat ? "messages" : "prompt") || (chat && key == "max_completion_tokens");
}

// One field of either endpoint; false when `key` is not one of them.
bool read_field(const std::string& key, const Json& v, CompletionRequest& r) {
  static const std::set<std::string> kSampling = {"max_tokens", "temperature", "top_p", "seed"};
  if (!known_field(key, r.chat)) return false;
  if (v.is_null() && key != "model" && key != "prompt" && key != "messages") return true;  // null: the default
  if (key == "model") {
    r.model = string_of(v, key);
  } else if (kSampling.count(key) || (r.chat && key == "max_completion_tokens")) {
    read_sampling(key, v, r);
  } else if (key == "stop") {
    read_stop(v, r);
  } else if (key == "stream") {
    if (!v.is_boolean()) throw bad(key, std::string("stream must be true or false, got ") + type_name(v));
    r.stream = v.get<bool>();
  } else if (key == "stream_options") {
    read_stream_options(v, r);
  } else if (key == "user") {
    string_of(v, key);
  } else if (!r.chat && key == "prompt") {
    read_prompt(v, r);
  } else if (r.chat && key == "messages") {
    read_messages(v, r);
  } else {
    return false;
  }
  return true;
}

CompletionRequest parse(const std::string& body, bool chat) {
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {
    throw bad("", "malformed JSON body: " + detail::printable(e.what()));
  }
  if (!j.is_object()) throw bad("", std::string("the body must be a JSON object, got ") + type_name(j));
  CompletionRequest r;
  r.chat = chat;
  for (const auto& [key, value] : j.items()) {
    if (read_field(key, value, r)) continue;
    if (unbuilt_fields().count(key)) {
      if (inert_field(key, value)) continue;
      throw bad(key, key + " " + got(value) + " is not supported by this server");
    }
    throw bad(key, "unknown field '" + detail::printable(key) + "'");
  }
  if (!j.contains("model") || r.model.empty()) throw bad("model", "model is required");
  const char* input = chat ? "messages" : "prompt";
  if (!j.contains(input)) throw bad(input, std::string(input) + " is required");
  if (r.include_usage && !r.stream) throw bad("stream_options", "stream_options is only allowed with stream true");
  return r;
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body) { return parse(body, false); }

CompletionRequest parse_chat_request(const std::string& body) { return parse(body, true); }

}  // namespace deepspeed::serving
