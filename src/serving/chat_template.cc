// ChatTemplate: finds a model folder's template and special tokens as transformers does, and is the one place the
// Jinja2 renderer meets JSON (nlohmann's ordered_json keeps the key order Python's dicts keep, which tojson and
// dict iteration print).
#include "deepspeed/serving/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "serving/jinja_lexer.h"
#include "serving/jinja_parser.h"
#include "serving/jinja_renderer.h"

namespace deepspeed::serving {

namespace {

using OrderedJson = nlohmann::ordered_json;

// The special tokens apply_chat_template passes to every template (transformers' SPECIAL_TOKENS_ATTRIBUTES).
const char* const kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DS_CHECK_T(DataError, in.good(), path, ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

OrderedJson read_json_object(const std::string& path) {
  OrderedJson j;
  try {
    j = OrderedJson::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path + ": not JSON (" + e.what() + ")");
  }
  DS_CHECK_T(DataError, j.is_object(), path, ": expected a JSON object, got ", j.type_name());
  return j;
}

// tokenizer_config.json's "chat_template": a string, or transformers' list of {"name", "template"} (the
// "default" one is used, as apply_chat_template uses it when no name is given).
std::string template_from_config(const OrderedJson& config, const std::string& path) {
  const auto it = config.find("chat_template");
  DS_CHECK_T(DataError, it != config.end() && !it->is_null(), path, " has no chat_template");
  if (it->is_string()) return it->get<std::string>();
  DS_CHECK_T(DataError, it->is_array(), path, ": chat_template must be a string or a list of {name, template}, got ",
             it->type_name());
  std::string names;
  for (const auto& entry : *it) {
    DS_CHECK_T(DataError, entry.is_object() && entry.contains("name") && entry.contains("template"), path,
               ": each chat_template entry must be {\"name\": ..., \"template\": ...}");
    if (entry["name"] == "default" && entry["template"].is_string()) return entry["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + entry["name"].dump();
  }
  throw DataError(path + ": chat_template lists templates [" + names + "] but none named \"default\"");
}

// A special token as tokenizer_config.json gives it: a string, or an AddedToken object {"content": ...}.
void read_special_tokens(const OrderedJson& config, const std::string& path,
                         std::map<std::string, std::string>& tokens) {
  for (const char* key : kSpecialTokens) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_string()) {
      tokens[key] = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      tokens[key] = (*it)["content"].get<std::string>();
    } else {
      throw DataError(path + ": " + key + " must be a string or an AddedToken object with \"content\", got " +
                      it->dump());
    }
  }
}

// Deeper JSON is refused rather than walked: every pass over a value (repr, tojson, ==) recurses once per level.
constexpr int kMaxJsonDepth = 256;

jinja::Value to_value(const OrderedJson& j, int depth = 0) {
  if (depth > kMaxJsonDepth) {
    throw ChatTemplateError("JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  switch (j.type()) {
    case OrderedJson::value_t::null:
      return jinja::Value::none();
    case OrderedJson::value_t::boolean:
      return jinja::Value(j.get<bool>());
    case OrderedJson::value_t::number_integer:
      return jinja::Value(j.get<int64_t>());
    case OrderedJson::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return jinja::Value(static_cast<double>(u));
      return jinja::Value(static_cast<int64_t>(u));
    }
    case OrderedJson::value_t::number_float:
      return jinja::Value(j.get<double>());
    case OrderedJson::value_t::string:
      return jinja::Value(j.get<std::string>());
    case OrderedJson::value_t::array: {
      jinja::List items;
      for (const auto& item : j) items.push_back(to_value(item, depth + 1));
      return jinja::Value::list(std::move(items));
    }
    case OrderedJson::value_t::object: {
      jinja::Map m;
      for (const auto& [k, v] : j.items()) m.items.emplace_back(k, to_value(v, depth + 1));
      return jinja::Value::map(std::move(m));
    }
    default:
      throw ChatTemplateError("unsupported JSON value of type " + std::string(j.type_name()));
  }
}

OrderedJson parse_request_json(const std::string& text, const char* what) {
  try {
    return OrderedJson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ChatTemplateError(std::string(what) + " is not JSON (" + e.what() + ")");
  }
}

}  // namespace

struct ChatTemplate::Impl {
  jinja::Template tmpl;
  std::map<std::string, std::string> variables;
};

ChatTemplate::ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::from_string(const std::string& source, const std::string& source_name,
                                       const std::map<std::string, std::string>& variables) {
  auto impl = std::make_shared<Impl>();
  try {
    impl->tmpl = jinja::parse_template(source, source_name);
  } catch (const jinja::SyntaxError& e) {
    const std::string position = jinja::source_position(jinja::normalize_newlines(source), e.offset);
    throw DataError(source_name + ":" + position + ": " + detail::printable(e.what()));
  }
  impl->variables = variables;
  return ChatTemplate(std::move(impl));
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir) {
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (std::filesystem::path(dir) / "chat_template.jinja").string();
  const OrderedJson config = read_json_object(config_path);
  std::map<std::string, std::string> tokens;
  read_special_tokens(config, config_path, tokens);
  // transformers' legacy path: without added_tokens_decoder, special_tokens_map.json's entries win.
  const std::string map_path = (std::filesystem::path(dir) / "special_tokens_map.json").string();
  if (!config.contains("added_tokens_decoder") && std::filesystem::exists(map_path)) {
    read_special_tokens(read_json_object(map_path), map_path, tokens);
  }
  // A chat_template.jinja beside the config takes priority over the config's own template, as in transformers.
  if (std::filesystem::exists(jinja_path)) return from_string(read_text_file(jinja_path), jinja_path, tokens);
  return from_string(template_from_config(config, config_path), config_path, tokens);
}

std::string ChatTemplate::render(const std::string& messages_json, bool add_generation_prompt,
                                 const std::string& extra_json) const {
  const OrderedJson messages = parse_request_json(messages_json, "messages");
  if (!messages.is_array())
    throw ChatTemplateError("messages must be a JSON array, got " + std::string(messages.type_name()));
  const OrderedJson extra = parse_request_json(extra_json, "chat template variables");
  if (!extra.is_object()) throw ChatTemplateError("chat template variables must be a JSON object");
  // apply_chat_template's order: special tokens, then the caller's keyword arguments, then its own parameters.
  jinja::Map vars;
  for (const auto& [k, v] : impl_->variables) vars.set(k, jinja::Value(v));
  for (const auto& [k, v] : extra.items()) vars.set(k, to_value(v));
  if (vars.find("tools") == nullptr) vars.set("tools", jinja::Value::none());
  if (vars.find("documents") == nullptr) vars.set("documents", jinja::Value::none());
  vars.set("messages", to_value(messages));
  vars.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  const std::string& name = impl_->tmpl.source_name;
  try {
    return jinja::render_template(impl_->tmpl, vars);
  } catch (const jinja::RaisedError& e) {
    throw ChatTemplateError("chat template " + name + " refused the conversation: " + detail::printable(e.what()));
  } catch (const jinja::RenderError& e) {
    throw ChatTemplateError(name + ":" + detail::printable(e.what()));
  } catch (const jinja::UnsupportedError& e) {
    throw ChatTemplateError(name + ":" + detail::printable(e.what()) +
                            " (not implemented by deepspeed-cpp's chat template renderer)");
  }
}

const std::string& ChatTemplate::source_name() const { return impl_->tmpl.source_name; }

}  // namespace deepspeed::serving
