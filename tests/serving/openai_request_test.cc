// OpenAI request bodies: what the openai client sends parses to the values it holds, and each bad body is refused
// with a RequestError of one line naming the field (param) as OpenAI's error JSON does.
#include "serving/openai_request.h"

#include <gtest/gtest.h>

#include <string>

#include "serving/openai_response.h"

namespace ds = deepspeed::serving;

namespace {

ds::RequestError refusal(const std::string& body, bool chat = false) {
  try {
    chat ? ds::parse_chat_request(body) : ds::parse_completion_request(body);
  } catch (const ds::RequestError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ds::RequestError(0, "");
}

}  // namespace

TEST(OpenAiRequest, ParsesWhatTheClientSends) {
  const ds::CompletionRequest r = ds::parse_completion_request(
      R"({"model": "m", "prompt": ["Hi"], "max_tokens": 5, "temperature": 0, "top_p": 0.5, "seed": 3,
          "stop": "\n", "stream": true, "stream_options": {"include_usage": true}, "n": 1, "echo": false,
          "logprobs": null, "presence_penalty": 0, "user": "u"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "Hi");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_EQ(*r.temperature, 0.0);
  EXPECT_EQ(*r.top_p, 0.5);
  EXPECT_EQ(*r.seed, 3u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream && r.include_usage);
  const ds::CompletionRequest ids = ds::parse_completion_request(R"({"model": "m", "prompt": [[1, 2, 3]]})");
  EXPECT_TRUE(ids.prompt_is_tokens);
  EXPECT_EQ(ids.prompt_tokens, (std::vector<int64_t>{1, 2, 3}));
  const ds::CompletionRequest chat = ds::parse_chat_request(
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 7})");
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[1].content, "ab");
  EXPECT_EQ(*chat.max_tokens, 7);
}

TEST(OpenAiRequest, RefusesEachBadFieldByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model": "m", "prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 99999999999999999999})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "temperature": 3})", "temperature"},
      {R"({"model": "m", "prompt": "x", "top_p": 0})", "top_p"},
      {R"({"model": "m", "prompt": "x", "stop": ""})", "stop"},
      {R"({"model": "m", "prompt": "x", "stop": [1]})", "stop[0]"},
      {R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream"},
      {R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"model": "m", "prompt": "x", "best_of": 2})", "best_of"},
      {R"({"model": "m", "prompt": "x", "suffix": "y"})", "suffix"},
      {R"({"model": "m", "prompt": "x", "frequency_penalty": 0.5})", "frequency_penalty"},
      {R"({"model": "m", "prompt": "x", "extra": null})", "extra"},
      {R"({"model": "m", "prompt": ""})", "prompt"},
      {R"({"model": "m", "prompt": [1, "a"]})", "prompt[1]"},
      {R"({"prompt": "x"})", "model"},
      {R"({"model": 3, "prompt": "x"})", "model"},
      {"{\"model\": \"m\", \"prompt\": \"x\", \"bad\\nkey\": 1}", "bad\nkey"},
  };
  for (const auto& [body, param] : cases) {
    const ds::RequestError e = refusal(body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), param) << body << ": " << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line: " << e.what();
  }
  EXPECT_EQ(refusal(R"({"model": "m", "messages": []})", true).param(), "messages");
  EXPECT_EQ(refusal(R"({"model": "m", "messages": [{"content": "x"}]})", true).param(), "messages[0].role");
  EXPECT_EQ(refusal(R"({"model": "m", "messages": [{"role": "user", "content": 1}]})", true).param(),
            "messages[0].content");
  EXPECT_EQ(refusal(R"({"model": "m", "prompt": "x", "messages": [{"role": "user", "content": "x"}]})", true).param(),
            "prompt");
  EXPECT_EQ(refusal(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                       "max_completion_tokens": 2})",
                    true)
                .param(),
            "max_tokens");  // keys are read in sorted order
}

TEST(OpenAiRequest, MalformedJsonIsOneLineWithoutParam) {
  for (const std::string body : {"{\"model\": \"m\",\n \"prompt\": ", "[1]", "", "\"text\""}) {
    const ds::RequestError e = refusal(body);
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "");
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_NE(ds::error_json(e).find("\"param\":null"), std::string::npos) << ds::error_json(e);
  }
}
