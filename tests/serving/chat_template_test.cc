// ChatTemplate against transformers: the real chat templates under chat_templates/ rendered on the conversations
// chat_template_reference.py rendered with transformers' own code, byte for byte (or, where the template refuses the
// conversation, the same message); model folders read as AutoTokenizer reads them; and every bad template or input
// refused in one line naming the file, the construct or the position.
#include "deepspeed/serving/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using deepspeed::DataError;
using deepspeed::serving::ChatTemplate;
using deepspeed::serving::ChatTemplateError;
using Json = nlohmann::ordered_json;

// The fixture's output (chat_template_reference.py) and the template copies, from the build.
const std::string kReferenceDir = DS_CHAT_TEMPLATE_REFERENCE;
const std::string kTemplatesDir = DS_CHAT_TEMPLATES;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) throw std::runtime_error(path + ": cannot open (run the serving_chat_template_reference test)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const Json& reference() {
  static const Json cases = Json::parse(read_file(kReferenceDir + "/cases.json"));
  return cases;
}

ChatTemplate load_template(const std::string& file, const Json& special_tokens) {
  std::map<std::string, std::string> tokens;
  for (const auto& [k, v] : special_tokens.items()) tokens[k] = v.get<std::string>();
  return ChatTemplate::from_string(read_file(kTemplatesDir + "/" + file), file, tokens);
}

std::string today() {
  char buf[64];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return std::string(buf, std::strftime(buf, sizeof(buf), "%d %b %Y", &local));
}

// Llama 3.2 dates its system message with strftime_now when no date_string is given: transformers' text then
// carries the reference run's date, ours today's (they differ when the suite crosses midnight).
std::string dated_today(const std::string& file, const Json& c, std::string expected) {
  if (file.find("Llama-3.2") == std::string::npos || c["extra"].contains("date_string")) return expected;
  const std::string then = reference()["today"].get<std::string>(), now = today();
  for (size_t at = expected.find(then); at != std::string::npos; at = expected.find(then, at + now.size()))
    expected.replace(at, then.size(), now);
  return expected;
}

// Every reference case of `file`: the same text as transformers, or a ChatTemplateError carrying its message.
void check_template(const std::string& file) {
  int checked = 0;
  for (const Json& c : reference()["cases"]) {
    if (c["template"] != file) continue;
    SCOPED_TRACE(file + " case " + c["case"].get<std::string>() +
                 (c["add_generation_prompt"].get<bool>() ? " with" : " without") + " generation prompt");
    const ChatTemplate tmpl = load_template(file, c["special_tokens"]);
    const std::string messages = c["messages"].dump();
    const std::string extra = c["extra"].dump();
    const bool agp = c["add_generation_prompt"].get<bool>();
    if (c.contains("expected")) {
      EXPECT_EQ(tmpl.render(messages, agp, extra), dated_today(file, c, c["expected"].get<std::string>()));
    } else {
      try {
        tmpl.render(messages, agp, extra);
        ADD_FAILURE() << "rendered, but transformers raised: " << c["error"].get<std::string>();
      } catch (const ChatTemplateError& e) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 8) << "too few reference cases for " << file;
}

TEST(ChatTemplate, Llama31MatchesTransformers) { check_template("meta-llama-Llama-3.1-8B-Instruct.jinja"); }
TEST(ChatTemplate, Llama32MatchesTransformers) { check_template("meta-llama-Llama-3.2-3B-Instruct.jinja"); }
TEST(ChatTemplate, Mistral7bV03MatchesTransformers) { check_template("mistralai-Mistral-7B-Instruct-v0.3.jinja"); }
TEST(ChatTemplate, Qwen25MatchesTransformers) { check_template("Qwen-Qwen2.5-7B-Instruct.jinja"); }
TEST(ChatTemplate, Qwen3MatchesTransformers) { check_template("Qwen-Qwen3-0.6B.jinja"); }
TEST(ChatTemplate, Phi35MatchesTransformers) { check_template("microsoft-Phi-3.5-mini-instruct.jinja"); }
TEST(ChatTemplate, Gemma2MatchesTransformers) { check_template("google-gemma-2-2b-it.jinja"); }
TEST(ChatTemplate, JinjaFeaturesMatchJinja2) { check_template("jinja_features.jinja"); }

// from_model_dir finds the template where AutoTokenizer does (chat_template.jinja; the config's "default" entry)
// with the special tokens it passes, and renders what apply_chat_template renders.
TEST(ChatTemplate, ModelFoldersMatchApplyChatTemplate) {
  const std::string ref = kReferenceDir;
  int checked = 0;
  for (const Json& c : reference()["folders"]) {
    const std::string dir = ref + "/" + c["folder"].get<std::string>();
    SCOPED_TRACE(dir);
    const ChatTemplate tmpl = ChatTemplate::from_model_dir(dir);
    const bool from_jinja = c["folder"] == "model_jinja";
    EXPECT_EQ(tmpl.source_name(), dir + (from_jinja ? "/chat_template.jinja" : "/tokenizer_config.json"));
    EXPECT_EQ(tmpl.render(c["messages"].dump(), c["add_generation_prompt"].get<bool>()), c["expected"]);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplate, FolderWithoutTemplateIsRefusedByName) {
  const std::string dir = kReferenceDir + "/model_none";
  EXPECT_EQ(error_of<DataError>([&] { ChatTemplate::from_model_dir(dir); }),
            dir + "/tokenizer_config.json has no chat_template");
  const std::string missing = kReferenceDir + "/no_such_model";
  EXPECT_EQ(error_of<DataError>([&] { ChatTemplate::from_model_dir(missing); }),
            missing + "/tokenizer_config.json: cannot open");
}

TEST(ChatTemplate, UnsupportedConstructsAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% include 'other.jinja' %}", "bad.jinja:1:4: unsupported tag '{% include %}'"},
      {"{{ messages | wordcount }}", "bad.jinja:1:15: unsupported filter 'wordcount'"},
      {"x\n{{ 'a{}'.format(1) }}", "bad.jinja:2:9: unsupported method '.format()'"},
      {"{% if x is escaped %}{% endif %}", "bad.jinja:1:12: unsupported test 'is escaped'"},
      {"{% for m in messages recursive %}{% endfor %}", "bad.jinja:1:22: unsupported recursive for loop"},
      {"{{ cycler('a', 'b') }}", "bad.jinja:1:4: unsupported function 'cycler()'"},
      {"{% with x = 1 %}{{ x }}{% endwith %}", "bad.jinja:1:4: unsupported tag '{% with %}'"},
  };
  for (const auto& [source, message] : cases) {
    const std::string error = error_of<DataError>([&] { ChatTemplate::from_string(source, "bad.jinja"); });
    EXPECT_EQ(error.rfind(message, 0), 0u) << source << " gave: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(ChatTemplate, MalformedTemplatesNameThePosition) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% if x %}hello", "bad.jinja:1:16: unexpected end of template, expected 'endif'"},
      {"line one\n{{ 1 + }}", "bad.jinja:2:8: unexpected end of print statement"},
      {"{{ (1 }}", "bad.jinja:1:7: unexpected '}', expected ')'"},
      {"ok\n  {# never closed", "bad.jinja:2:3: missing end of comment tag"},
      {"{% for x in y %}{% endif %}", "bad.jinja:1:20: unknown tag 'endif'"},
      {"{% endfor %}", "bad.jinja:1:4: unknown tag 'endfor'"},
      {"{{ 'unterminated }}", "bad.jinja:1:4: unterminated string"},
      {"{% break %}", "bad.jinja:1:4: 'break' outside a loop"},
  };
  for (const auto& [source, message] : cases) {
    EXPECT_EQ(error_of<DataError>([&] { ChatTemplate::from_string(source, "bad.jinja"); }), message) << source;
  }
}

TEST(ChatTemplate, RaiseExceptionGivesTheTemplatesMessage) {
  const Json& c = reference()["cases"][0];
  const ChatTemplate mistral = load_template("mistralai-Mistral-7B-Instruct-v0.3.jinja", c["special_tokens"]);
  const std::string messages = R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])";
  EXPECT_EQ(error_of<ChatTemplateError>([&] { mistral.render(messages, true); }),
            "chat template mistralai-Mistral-7B-Instruct-v0.3.jinja refused the conversation: After the optional "
            "system message, conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplate, RenderErrorsNameThePosition) {
  const ChatTemplate add = ChatTemplate::from_string("text\n{{ 'a' + messages | length }}", "t.jinja");
  EXPECT_EQ(error_of<ChatTemplateError>([&] { add.render("[]", false); }),
            "t.jinja:2:8: can only concatenate str (not \"int\") to str");
  const ChatTemplate attr = ChatTemplate::from_string("{{ messages[0].role.name.x }}", "t.jinja");
  EXPECT_EQ(error_of<ChatTemplateError>([&] { attr.render(R"([{"role": "user"}])", false); }),
            "t.jinja:1:25: 'str object' has no attribute 'name'");
  EXPECT_EQ(error_of<ChatTemplateError>([&] { add.render("{\"role\": 1", false); }).rfind("messages is not JSON", 0),
            0u);
  EXPECT_EQ(error_of<ChatTemplateError>([&] { add.render("{}", false); }), "messages must be a JSON array, got object");
}

// One template rendered from several threads at once gives transformers' text every time.
TEST(ChatTemplate, ConcurrentRendersAgree) {
  const Json* chosen = nullptr;
  for (const Json& c : reference()["cases"]) {
    if (c["template"] == "Qwen-Qwen3-0.6B.jinja" && c["case"] == "thinking") chosen = &c;
  }
  ASSERT_NE(chosen, nullptr);
  const ChatTemplate tmpl = load_template("Qwen-Qwen3-0.6B.jinja", (*chosen)["special_tokens"]);
  const std::string messages = (*chosen)["messages"].dump();
  const std::string expected = (*chosen)["expected"].get<std::string>();
  const bool agp = (*chosen)["add_generation_prompt"].get<bool>();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) mismatches[t] += tmpl.render(messages, agp) != expected;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
