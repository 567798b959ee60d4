// See chat_template.h.
#include "data/chat_template.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/json_file.h"
#include "deepspeed/error.h"

namespace deepspeed::data {

namespace {

using json = nlohmann::json;

constexpr const char* kContent = "{content}";
constexpr const char* kBegin = "{% generation %}";
constexpr const char* kEnd = "{% endgeneration %}";

// How often `needle` occurs in `s`.
size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + needle.size())) ++n;
  return n;
}

// Appends `text` to `chunks`, joining the last chunk when it trains alike.
void append(std::vector<ChatChunk>& chunks, const std::string& text, bool trained) {
  if (text.empty()) return;
  if (!chunks.empty() && chunks.back().trained == trained) {
    chunks.back().text += text;
  } else {
    chunks.push_back({text, trained});
  }
}

}  // namespace

ChatTemplate ChatTemplate::from_file(const std::string& path) {
  const json j = read_json_file(path);
  DS_CHECK_T(DataError, j.is_object(), path, ": a chat template is a JSON object of role formats");
  ChatTemplate t;
  t.path_ = path;
  for (const auto& [key, value] : j.items()) {
    DS_CHECK_T(DataError, value.is_string(), path, ": \"", key, "\" must be a string");
    const std::string s = value.get<std::string>();
    if (key == "default_system") {
      t.default_system_ = s;
      continue;
    }
    DS_CHECK_T(DataError, key == "system" || key == "user" || key == "assistant", path, ": unknown key \"", key,
               "\" (system, user, assistant, default_system)");
    DS_CHECK_T(DataError, count(s, kContent) == 1, path, ": \"", key, "\" must hold {content} once");
    const bool assistant = key == "assistant";
    const size_t begin = s.find(kBegin), end = s.find(kEnd), content = s.find(kContent);
    Format f;
    if (!assistant) {
      DS_CHECK_T(DataError, begin == std::string::npos && end == std::string::npos, path, ": \"", key,
                 "\": only the assistant's turn trains ({% generation %} belongs in \"assistant\")");
      f.before = s.substr(0, content);
      f.after = s.substr(content + std::string(kContent).size());
      (key == "system" ? t.system_ : t.user_) = f;
      continue;
    }
    DS_CHECK_T(DataError, count(s, kBegin) == 1 && count(s, kEnd) == 1 && begin < content && content < end, path,
               ": \"assistant\" must mark what trains as {% generation %}...{content}...{% endgeneration %}");
    f.before = s.substr(0, begin);
    f.trained_before = s.substr(begin + std::string(kBegin).size(), content - begin - std::string(kBegin).size());
    const size_t content_end = content + std::string(kContent).size();
    f.trained_after = s.substr(content_end, end - content_end);
    f.after = s.substr(end + std::string(kEnd).size());
    t.assistant_ = f;
  }
  DS_CHECK_T(DataError, t.assistant_.has_value(), path, ": no \"assistant\" format (the turn that trains)");
  return t;
}

std::vector<ChatChunk> ChatTemplate::render(const json& messages, const std::string& where) const {
  DS_CHECK_T(DataError, messages.is_array() && !messages.empty(), where, ": messages must be a non-empty array");
  std::vector<ChatChunk> chunks;
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    DS_CHECK_T(DataError,
               m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                   m["content"].is_string(),
               where, ": message ", i, " must be {\"role\": \"...\", \"content\": \"...\"}");
    const std::string role = m["role"].get<std::string>(), content = m["content"].get<std::string>();
    if (i == 0 && role != "system" && default_system_) {
      DS_CHECK_T(DataError, system_.has_value(), path_, ": default_system needs a \"system\" format");
      append(chunks, system_->before + *default_system_ + system_->after, false);
    }
    const std::optional<Format>& f = role == "system" ? system_ : role == "user" ? user_ : assistant_;
    DS_CHECK_T(DataError, role == "system" || role == "user" || role == "assistant", where, ": message ", i,
               " has role \"", role, "\" (system, user, assistant)");
    DS_CHECK_T(DataError, f.has_value(), where, ": message ", i, " has role \"", role, "\", which ", path_,
               " has no format for");
    append(chunks, f->before, false);
    if (role == "assistant") {
      any_assistant = true;
      append(chunks, f->trained_before + content + f->trained_after, true);
    } else {
      append(chunks, content, false);
    }
    append(chunks, f->after, false);
  }
  DS_CHECK_T(DataError, any_assistant, where, ": no assistant message (nothing would train)");
  return chunks;
}

}  // namespace deepspeed::data
