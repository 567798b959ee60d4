// The key table (src/config/key_table.h) against the parser and the dump it drives: each listed key is read
// under its name and aliases, and written back with the default the table states.
#include <gtest/gtest.h>

#include <sstream>

#include "config/key_catalog.h"
#include "deepspeed/config.h"

namespace deepspeed::config {
namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  return parts;
}

// {"a": {"b": value}} for "a.b".
Json nested(const std::string& path, const Json& value) {
  Json root = Json::object();
  Json* node = &root;
  for (const std::string& part : split_path(path)) node = &(*node)[part];
  *node = value;
  // optimizer.* and scheduler.* keys need a type beside them.
  if (root.contains("optimizer")) root["optimizer"]["type"] = "Adam";
  if (root.contains("scheduler")) root["scheduler"]["type"] = "WarmupLR";
  return root;
}

const Json* at(const Json& root, const std::string& path) {
  const Json* node = &root;
  for (const std::string& part : split_path(path)) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return node;
}

// Every key with a stated default, given alone at that default under each of its spellings, parses with no
// warning (it is a known key there) and dumps back at its main path with that value. A key listed but read under
// another name, an alias the reader does not take, or a default the table states wrongly fails here.
TEST(KeyTable, EachKeyAloneAtItsDefaultReadsAndDumpsBack) {
  int checked = 0;
  for (const KeyInfo& k : config_keys()) {
    // (Keys inside list elements, layer_specs[], are read per element: the element tests cover them.)
    if (k.default_json.empty() || k.default_json == "unset" || k.path.find("[]") != std::string::npos) continue;
    const Json value = Json::parse(k.default_json);
    std::vector<std::string> spellings = {k.path};
    spellings.insert(spellings.end(), k.aliases.begin(), k.aliases.end());
    for (const std::string& spelling : spellings) {
      SCOPED_TRACE(spelling);
      Config c;
      ASSERT_NO_THROW(c = Config::from_string(nested(spelling, value).dump()));
      EXPECT_TRUE(c.warnings().empty()) << c.warnings().front();
      const Json dumped = Json::parse(c.dump());
      const size_t dot = k.path.rfind('.');
      // Sections with no effect here (timers) are checked and not written back.
      if (dot != std::string::npos && !at(dumped, k.path.substr(0, dot))) continue;
      const Json* back = at(dumped, k.path);
      if (!k.dumped_at_default) {  // a key DeepSpeed 0.19.8 refuses: left out, so our dump stays DeepSpeed's
        EXPECT_EQ(back, nullptr) << "dumped at its default";
        continue;
      }
      ASSERT_NE(back, nullptr) << "not dumped";
      EXPECT_EQ(*back, value);
      ++checked;
    }
  }
  EXPECT_GT(checked, 180);  // the table lists the config's keys, not a handful
}

// Keys are listed once each, and the default Config's dump holds exactly the table's dumped keys at the top level.
TEST(KeyTable, EachPathOnceAndTheTopLevelDumpMatchesIt) {
  std::set<std::string> seen;
  for (const KeyInfo& k : config_keys()) {
    EXPECT_TRUE(seen.insert(k.path).second) << k.path;
    for (const std::string& a : k.aliases) EXPECT_TRUE(seen.insert(a).second) << a;
  }
  const Json dumped = Json::parse(Config{}.dump());
  for (auto it = dumped.begin(); it != dumped.end(); ++it) EXPECT_TRUE(seen.count(it.key())) << it.key();
}

TEST(KeyTable, ExplainNamesTheKeyAndRefusesAnUnknownOne) {
  const std::string text = explain_key("bfloat16");
  EXPECT_EQ(text.rfind("bf16\n", 0), 0u) << text;
  EXPECT_NE(text.find("also spelt: bfloat16"), std::string::npos) << text;
  try {
    explain_key("zero_optimization.stag");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "zero_optimization.stag: no such config key (did you mean 'zero_optimization.stage'?)");
  }
}

}  // namespace
}  // namespace deepspeed::config
