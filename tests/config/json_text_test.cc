// The config text reader against DeepSpeed's: every file under corpus/syntax is read by our
// parse_json_text and by the hjson Python package the way DeepSpeed reads it (hjson_load.py):
//   same/         both accept, with equal values;
//   both_reject/  both refuse;
//   hjson_only/   hjson accepts Hjson syntax that is not JSON-shaped; we refuse it on purpose with
//                 the message the file's `// expect: ` first line gives.
// Plus the reader's own behaviours that need no Python (positions in messages, limits).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/json_reader.h"
#include "deepspeed/config.h"
#include "deepspeed/error.h"
#include "temp_dir.h"

namespace deepspeed::config {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kSyntax = std::string(DS_CONFIG_CORPUS_DIR) + "/syntax";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> files_in(const std::string& sub) {
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(kSyntax + "/" + sub)) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string error_of(const std::string& text, const std::string& source = "t.json") {
  try {
    parse_json_text(text, source);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A Python that has hjson, or "" (the project's .venv, then the interpreter first on PATH, then Debian's).
std::string python_with_hjson() {
  for (const std::string python : {DS_TEST_PYTHON, "python3", "/usr/bin/python3"}) {
    if (std::system((python + " -c 'import hjson' >/dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}

// What hjson made of one file: accepted (with its value as JSON) or not.
struct HjsonResult {
  bool accepted = false;
  std::string detail;  // the value as strict JSON, or the Python exception
};

class AgainstHjson : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string python = python_with_hjson();
    if (python.empty()) {
      GTEST_SKIP() << "the hjson Python package is not installed (scripts/setup.sh installs it); "
                      "the reader is not compared with DeepSpeed's";
    }
    std::string command =
        python + " " + std::string(DS_CONFIG_TEST_DIR) + "/hjson_load.py " + out_dir_.path();
    for (const char* sub : {"same", "both_reject", "hjson_only"}) {
      for (const std::string& path : files_in(sub)) command += " '" + path + "'";
    }
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  HjsonResult hjson(const std::string& path) {
    std::ifstream in(out_dir_.file(fs::path(path).filename().string() + ".out"));
    HjsonResult r;
    std::string verdict;
    if (!std::getline(in, verdict)) {
      ADD_FAILURE() << "hjson_load.py wrote nothing for " << path;
      return r;
    }
    std::getline(in, r.detail);
    r.accepted = verdict == "ok";
    return r;
  }

  ds_test::TempDir out_dir_{"ds_hjson"};
};

TEST_F(AgainstHjson, SameFilesGiveEqualValues) {
  const auto paths = files_in("same");
  ASSERT_GE(paths.size(), 10u);
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    const HjsonResult h = hjson(path);
    ASSERT_TRUE(h.accepted) << "hjson refused it: " << h.detail;
    Json ours;
    ASSERT_NO_THROW(ours = parse_json_text(read_file(path), path));
    // nlohmann compares numbers by value across integer and float (hjson turns 1.0 into 1).
    EXPECT_EQ(ours, Json::parse(h.detail)) << "ours: " << ours.dump();
  }
}

TEST_F(AgainstHjson, BothRejectFiles) {
  const auto paths = files_in("both_reject");
  ASSERT_GE(paths.size(), 10u);
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    EXPECT_FALSE(hjson(path).accepted) << "hjson read it as " << hjson(path).detail;
    const std::string e = error_of(read_file(path), path);
    EXPECT_THAT(e, HasSubstr(path + ":"));  // file:line:column
  }
}

TEST_F(AgainstHjson, HjsonOnlySyntaxIsRefusedByName) {
  const auto paths = files_in("hjson_only");
  ASSERT_GE(paths.size(), 5u);
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    EXPECT_TRUE(hjson(path).accepted) << "hjson refused it too; move it to both_reject/";
    const std::string text = read_file(path);
    const std::string kPrefix = "// expect: ";
    ASSERT_EQ(text.rfind(kPrefix, 0), 0u) << "must start with " << kPrefix;
    const std::string expected = text.substr(kPrefix.size(), text.find('\n') - kPrefix.size());
    EXPECT_THAT(error_of(text, fs::path(path).filename().string()), HasSubstr(expected));
  }
}

TEST(JsonText, CommentsOfAllThreeKinds) {
  Json j = parse_json_text("# a\n{\"a\": 1, // b\n \"c\": /* d */ 2}", "x");
  EXPECT_EQ(j, Json::parse(R"({"a": 1, "c": 2})"));
}

TEST(JsonText, TrailingCommasAndNewlinesAsSeparators) {
  EXPECT_EQ(parse_json_text("{\"a\": [1, 2,], \"b\": 3,}", "x"),
            Json::parse(R"({"a":[1,2],"b":3})"));
  EXPECT_EQ(parse_json_text("{\"a\": 1\n\"b\": 2}", "x"), Json::parse(R"({"a":1,"b":2})"));
}

TEST(JsonText, EmptyFileIsAnEmptyObject) {
  EXPECT_EQ(parse_json_text("", "x"), Json::object());
  EXPECT_EQ(parse_json_text("  # only a comment\n", "x"), Json::object());
}

TEST(JsonText, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(error_of("{\n  \"a\": 1,,\n}", "ds.json"),
            "ds.json:2:10: invalid JSON: expected a key, got ','");
  EXPECT_EQ(error_of("{\n  \"a\": 1 \"b\": 2\n}", "ds.json"),
            "ds.json:2:10: invalid JSON: unexpected '\"' after the value (missing comma?)");
  EXPECT_EQ(error_of("{\"a\": 1 /* open", "ds.json"),
            "ds.json:1:9: invalid JSON: unterminated /* comment");
  EXPECT_EQ(error_of("{\"a\": 1}\n{}", "ds.json"),
            "ds.json:2:1: invalid JSON: unexpected '{' after the end of the JSON value");
  EXPECT_EQ(error_of("{\"a\": [1,\n", "ds.json"),
            "ds.json:1:7: invalid JSON: this '[' is never closed");
  // Columns count characters, not bytes: "é" is two bytes.
  EXPECT_EQ(error_of("{\"é\": x}", "ds.json"),
            "ds.json:1:7: invalid JSON: invalid value 'x' (unquoted strings are Hjson, not JSON; "
            "quote strings with \"..\")");
}

TEST(JsonText, DuplicateKeyNamesPathAndPosition) {
  EXPECT_EQ(error_of("{\"zero\": {\"stage\": 1,\n  \"stage\": 2}}", "ds.json"),
            "ds.json:2:3: zero.stage: duplicate key");
  EXPECT_EQ(error_of(R"({"l": [{"k": 1}, {"k": 2, "k": 3}]})", "ds.json"),
            "ds.json:1:27: l[1].k: duplicate key");
}

TEST(JsonText, NumbersKeepIntegersExact) {
  Json j = parse_json_text(R"({"a": 9007199254740993, "b": -5, "c": 5e8, "d": 1e-400})", "x");
  EXPECT_TRUE(j["a"].is_number_unsigned());
  EXPECT_EQ(j["a"].get<uint64_t>(), 9007199254740993ull);  // not rounded through a double
  EXPECT_EQ(j["b"].get<int64_t>(), -5);
  EXPECT_EQ(j["c"].get<double>(), 5e8);
  EXPECT_EQ(j["d"].get<double>(), 0.0);
  EXPECT_THAT(error_of(R"({"a": -1e400})"), HasSubstr("number -1e400 is out of range"));
}

TEST(JsonText, StringEscapesAndUtf8) {
  Json j = parse_json_text(R"({"s": "\u00e9\ud83d\ude00\n\'"})", "x");
  EXPECT_EQ(j["s"].get<std::string>(), "\xC3\xA9\xF0\x9F\x98\x80\n'");
  EXPECT_THAT(error_of(R"({"s": "\ud800"})"), HasSubstr("lone UTF-16 surrogate"));
  EXPECT_THAT(error_of("{\"s\": \"\xC3\"}"), HasSubstr("t.json:1:8: invalid UTF-8"));
  EXPECT_THAT(error_of("{\"s\": \"\xC0\xAF\"}"), HasSubstr("invalid UTF-8"));  // overlong '/'
}

TEST(JsonText, DeepNestingIsAnErrorNotACrash) {
  const std::string text = "{\"a\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  EXPECT_THAT(error_of(text), HasSubstr("nested deeper than"));
}

TEST(JsonText, ConfigFromFileReadsCommentedConfigs) {
  ds_test::TempDir dir("ds_commented");
  const std::string path = dir.file("ds.json");
  std::ofstream(path) << "# HF template\n{\n  \"train_batch_size\": 8, /* global */\n"
                         "  \"zero_optimization\": {\"stage\": 2,},\n}\n";
  Config c = Config::from_file(path);
  EXPECT_EQ(*c.train_batch_size, 8);
  EXPECT_EQ(c.zero.stage, 2);
}

}  // namespace
}  // namespace deepspeed::config
