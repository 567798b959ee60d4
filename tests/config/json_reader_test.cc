// The private reader: did-you-mean, typed getters and their messages, JSON syntax errors with line
// and column, duplicate keys.
#include "config/json_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/suggest.h"
#include "deepspeed/error.h"

namespace deepspeed::config {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Suggest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("stage", "stage"), 0u);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
}

TEST(Suggest, DidYouMeanPicksClosestCaseInsensitively) {
  std::vector<std::string> keys = {"stage", "reduce_bucket_size", "allgather_bucket_size",
                                   "stage3_prefetch_bucket_size"};
  EXPECT_EQ(did_you_mean("stage3_prefetch_bucket_sz", keys), "stage3_prefetch_bucket_size");
  EXPECT_EQ(did_you_mean("Reduce_Bucket_Size", keys), "reduce_bucket_size");
  EXPECT_EQ(did_you_mean("stgae", keys), "stage");
}

TEST(Suggest, NoSuggestionWhenNothingIsClose) {
  EXPECT_EQ(did_you_mean("zzzz", {"stage", "enabled"}), "");
  EXPECT_EQ(did_you_mean("completely_different_key", {"stage"}), "");
}

TEST(ObjectReader, UnknownKeyGetsSuggestionFromKeysAskedFor) {
  Json j = Json::parse(R"({"enabeld": true})");
  ObjectReader r(j, "fp16", nullptr);
  bool enabled = false;
  r.read_bool("enabled", &enabled);
  EXPECT_EQ(error_of([&] { r.finish(); }), "fp16.enabeld: unknown key (did you mean 'enabled'?)");
}

TEST(ObjectReader, UnknownKeyWithoutSuggestionListsValidKeys) {
  Json j = Json::parse(R"({"qqqqqqqq": 1})");
  ObjectReader r(j, "aio", nullptr);
  int depth = 0;
  bool submit = false;
  r.read_int("queue_depth", &depth);
  r.read_bool("single_submit", &submit);
  EXPECT_EQ(error_of([&] { r.finish(); }),
            "aio.qqqqqqqq: unknown key; valid keys here: queue_depth, single_submit");
}

TEST(ObjectReader, IntegersAcceptIntegralFloatsLike5e8) {
  Json j = Json::parse(R"({"a": 5e8, "b": 7, "c": 2.5, "d": "7", "e": true, "f": 1e30})");
  ObjectReader r(j, "z", nullptr);
  int64_t v = 0;
  EXPECT_TRUE(r.read_int("a", &v));
  EXPECT_EQ(v, 500000000);
  EXPECT_TRUE(r.read_int("b", &v));
  EXPECT_EQ(v, 7);
  EXPECT_EQ(error_of([&] { r.read_int("c", &v); }), "z.c: expected an integer, got 2.5");
  EXPECT_EQ(error_of([&] { r.read_int("d", &v); }), "z.d: expected an integer, got \"7\"");
  EXPECT_EQ(error_of([&] { r.read_int("e", &v); }), "z.e: expected an integer, got true");
  EXPECT_THAT(error_of([&] { r.read_int("f", &v); }), HasSubstr("z.f: expected an integer"));
  EXPECT_FALSE(r.read_int("absent", &v));
  EXPECT_EQ(v, 7);  // untouched
}

TEST(ObjectReader, RangesAreInMessages) {
  Json j = Json::parse(R"({"stage": 5, "ratio": 1.5, "count": -1})");
  ObjectReader r(j, "zero_optimization", nullptr);
  int stage = 0, count = 0;
  double ratio = 0;
  EXPECT_EQ(error_of([&] { r.read_int("stage", &stage, 0, 3); }),
            "zero_optimization.stage: expected an integer in 0..3, got 5");
  EXPECT_EQ(error_of([&] { r.read_number("ratio", &ratio, 0.0, 1.0); }),
            "zero_optimization.ratio: expected a number in 0..1, got 1.5");
  EXPECT_EQ(error_of([&] { r.read_int("count", &count, 0); }),
            "zero_optimization.count: expected an integer >= 0, got -1");
}

TEST(ObjectReader, BoolAndStringTypeErrors) {
  // (pydantic's string booleans, "yes" / "off" / "True", are read as DeepSpeed reads them; "maybe" is not one.)
  Json j = Json::parse(R"({"flag": "maybe", "name": 3, "list": ["a", 1]})");
  ObjectReader r(j, "s", nullptr);
  bool b = false;
  std::string s;
  std::vector<std::string> l;
  EXPECT_EQ(error_of([&] { r.read_bool("flag", &b); }),
            "s.flag: expected true or false, got \"maybe\"");
  EXPECT_EQ(error_of([&] { r.read_string("name", &s); }), "s.name: expected a string, got 3");
  EXPECT_EQ(error_of([&] { r.read_string_list("list", &l); }),
            "s.list[1]: expected a string, got 1");
}

TEST(ObjectReader, AutoOnlyWhereAllowedAndRecorded) {
  Json j = Json::parse(R"({"size": "auto", "other": "auto"})");
  std::set<std::string> autos;
  ObjectReader r(j, "zero_optimization", &autos);
  int64_t size = 42, other = 0;
  EXPECT_FALSE(r.read_int("size", &size, 0, INT64_MAX, AutoPolicy::kAllowAuto));
  EXPECT_EQ(size, 42);
  EXPECT_EQ(autos, (std::set<std::string>{"zero_optimization.size"}));
  EXPECT_EQ(error_of([&] { r.read_int("other", &other, 0); }),
            "zero_optimization.other: expected an integer >= 0, got \"auto\"");
}

TEST(ObjectReader, ChoiceCaseInsensitiveStoresCanonical) {
  Json j = Json::parse(R"({"mode": "fAiL", "strict": "fail"})");
  ObjectReader r(j, "checkpoint", nullptr);
  std::string mode;
  EXPECT_TRUE(r.read_choice("mode", &mode, {"Ignore", "Warn", "Fail"}, true));
  EXPECT_EQ(mode, "Fail");
  EXPECT_EQ(error_of([&] {
              r.read_choice("strict", &mode, {"Ignore", "Warn", "Fail"});
            }),
            "checkpoint.strict: expected one of Ignore, Warn, Fail, got \"fail\"");
}

TEST(ObjectReader, NotAnObject) {
  Json j = Json::parse("[1, 2]");
  EXPECT_EQ(error_of([&] { ObjectReader r(j, "fp16", nullptr); }),
            "fp16: expected an object, got [1,2]");
}

TEST(ParseJsonText, SyntaxErrorNamesSourceLineAndColumn) {
  std::string e = error_of([] { parse_json_text("{\n  \"a\": 1,\n  \"b\": ]\n}", "ds.json"); });
  EXPECT_THAT(e, HasSubstr("ds.json:3:8: invalid JSON: "));
  EXPECT_THAT(e, HasSubstr("unexpected ']'"));
}

TEST(ParseJsonText, CommentsAreAllowed) {
  Json j = parse_json_text("// header\n{\"a\": 1 /* inline */}", "x");
  EXPECT_EQ(j["a"], 1);
}

TEST(ParseJsonText, DuplicateKeysAreErrorsWithPath) {
  EXPECT_EQ(error_of([] { parse_json_text(R"({"zero": {"stage": 1, "stage": 2}})", "x"); }),
            "x:1:23: zero.stage: duplicate key");
  EXPECT_EQ(error_of([] { parse_json_text(R"({"a": 1, "a": 1})", "x"); }),
            "x:1:10: a: duplicate key");
  // Same key in sibling objects is fine.
  EXPECT_NO_THROW(parse_json_text(R"({"x": {"enabled": true}, "y": {"enabled": true}})", "x"));
  EXPECT_NO_THROW(parse_json_text(R"([{"k": 1}, {"k": 2}])", "x"));
}

}  // namespace
}  // namespace deepspeed::config
