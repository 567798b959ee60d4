// The sequence-length curriculum (deepspeed/data/curriculum.h) against DeepSpeed 0.19.8's CurriculumScheduler:
// tests/data/curriculum_reference.py wrote, for each case config, the lengths DeepSpeed gives steps 1..60 when it
// reads our resolved config (so the config goes both ways too). Then a resume's replay, the cut, and the config
// refusals, each by key.
#include "deepspeed/data/curriculum.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepspeed/error.h"

namespace {

namespace dd = deepspeed::data;
using json = nlohmann::json;

json expected() {
  const char* d = std::getenv("DS_CURRICULUM");
  if (d == nullptr) return json();
  std::ifstream in(std::string(d) + "/curriculum_expected.json");
  return json::parse(in);
}

TEST(SeqlenCurriculum, LengthsAreDeepSpeeds) {
  const json cases = expected();
  ASSERT_TRUE(cases.is_array() && cases.size() == 4) << "ctest runs curriculum_reference.py first";
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto config = deepspeed::Config::from_string(c["config"].dump());
    auto curriculum = dd::SeqlenCurriculum::from_config(config);
    ASSERT_NE(curriculum, nullptr);
    const auto lengths = c["lengths"].get<std::vector<int64_t>>();
    for (size_t i = 0; i < lengths.size(); ++i)
      EXPECT_EQ(curriculum->update(static_cast<int64_t>(i) + 1), lengths[i]) << "step " << i + 1;
    // A resumed run jumps to its step: the steps between are replayed, so it holds the uninterrupted run's state.
    auto resumed = dd::SeqlenCurriculum::from_config(config);
    EXPECT_EQ(resumed->update(37), lengths[36]);
    EXPECT_EQ(resumed->update(37), lengths[36]) << "the same step again keeps the length";
    EXPECT_THROW(resumed->update(36), deepspeed::DataError);
  }
}

TEST(SeqlenCurriculum, CutsInputsAndTargetsToTheLength) {
  const auto config = deepspeed::Config::from_string(R"({"train_batch_size": 2,
      "data_efficiency": {"data_sampling": {"curriculum_learning": {"enabled": true, "curriculum_metrics": {"seqlen": {
        "min_difficulty": 4, "max_difficulty": 16, "schedule_type": "fixed_discrete",
        "schedule_config": {"difficulty": [4, 16], "max_step": [1]}}}}}}})");
  auto curriculum = dd::SeqlenCurriculum::from_config(config);
  ASSERT_NE(curriculum, nullptr);
  const at::Tensor x = at::arange(24, at::kLong).reshape({2, 12}), y = x + 1;
  curriculum->update(1);
  auto [cx, cy] = curriculum->truncate(x, y);
  EXPECT_TRUE(at::equal(cx, x.narrow(1, 0, 4)));
  EXPECT_TRUE(at::equal(cy, y.narrow(1, 0, 4)));
  curriculum->update(2);  // 16 is past the 12 positions there are: whole
  std::tie(cx, cy) = curriculum->truncate(x, y);
  EXPECT_TRUE(at::equal(cx, x));
  EXPECT_TRUE(at::equal(cy, y));
}

TEST(SeqlenCurriculum, NoneUnlessEnabled) {
  EXPECT_EQ(dd::SeqlenCurriculum::from_config(deepspeed::Config::from_string(R"({"train_batch_size": 2})")), nullptr);
  const auto off = deepspeed::Config::from_string(
      R"({"train_batch_size": 2, "curriculum_learning": {"enabled": false, "min_difficulty": 8}})");
  EXPECT_EQ(dd::SeqlenCurriculum::from_config(off), nullptr);
  ASSERT_EQ(off.warnings().size(), 1u);
  EXPECT_NE(off.warnings()[0].find("curriculum_learning: removed in DeepSpeed 0.19.8"), std::string::npos);
}

// `config` (JSON text after "train_batch_size": 2) must be refused with a message holding `says`.
void expect_refused(const std::string& config, const std::string& says) {
  try {
    deepspeed::Config::from_string(R"({"train_batch_size": 2, )" + config + "}");
    ADD_FAILURE() << "accepted: " << config;
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

std::string metric(const std::string& name, const std::string& body) {
  return R"("data_efficiency": {"data_sampling": {"curriculum_learning": {"enabled": true, "curriculum_metrics": {")" +
         name + R"(": {)" + body + "}}}}}";
}

TEST(SeqlenCurriculum, RefusesWhatIsNotBuiltByKey) {
  const std::string linear = R"("min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_linear")";
  const std::string m = "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.";
  expect_refused(metric("vocabularyrarity", linear + R"(, "schedule_config": {"total_curriculum_step": 10,
                 "difficulty_step": 8})"),
                 m + "vocabularyrarity: is not supported");
  expect_refused(metric("seqlen", R"("min_difficulty": 8, "max_difficulty": 64, "schedule_type": "custom")"),
                 m + "seqlen.schedule_type: \"custom\"");
  expect_refused(metric("seqlen", linear), m + "seqlen.schedule_config.total_curriculum_step: is required");
  expect_refused(metric("seqlen", R"("max_difficulty": 64, "schedule_type": "fixed_linear")"),
                 m + "seqlen.min_difficulty: is required");
  expect_refused(metric("seqlen", R"("min_difficulty": 80, "max_difficulty": 64, "schedule_type": "fixed_discrete",
                 "schedule_config": {"difficulty": [8], "max_step": []})"),
                 m + "seqlen.min_difficulty: must be <= max_difficulty");
  expect_refused(metric("seqlen", R"("min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_discrete",
                 "schedule_config": {"difficulty": [8, 64], "max_step": [2, 4]})"),
                 m + "seqlen.schedule_config: fixed_discrete needs");
  expect_refused(metric("seqlen", R"("min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_root",
                 "schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8})"),
                 m + "seqlen.schedule_config.root_degree: is required by fixed_root");
  expect_refused(metric("seqlen", linear + R"(, "difficulty_type": "percentile",
                 "schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8})"),
                 m + "seqlen.difficulty_type");
  expect_refused(metric("seqlen", linear + R"(, "clustering_type": "schedule_based",
                 "schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8})"),
                 m + "seqlen.clustering_type");
  expect_refused(R"("data_efficiency": {"data_sampling": {"dynamic_batching": {"enabled": true}}})",
                 "data_efficiency.data_sampling.dynamic_batching: DeepSpeed's dynamic batching is not supported");
  expect_refused(R"("data_efficiency": {"data_routing": {"enabled": true}})",
                 "data_efficiency.data_routing: DeepSpeed's data routing (random-LTD) is not supported");
  // Switched off, both are accepted (users' configs carry them so).
  EXPECT_NO_THROW(deepspeed::Config::from_string(R"({"train_batch_size": 2, "data_efficiency": {"data_routing":
      {"enabled": false}, "data_sampling": {"dynamic_batching": {"enabled": false, "max_tokens": 4096}}}})"));
  expect_refused(R"("curriculum_learning": {"enabled": true, "curriculum_type": "vocab", "min_difficulty": 8,
                 "max_difficulty": 64, "schedule_type": "fixed_linear"})",
                 "curriculum_learning.curriculum_type: only \"seqlen\"");
  const std::string both = metric("seqlen", linear + R"(, "schedule_config": {"total_curriculum_step": 10,
      "difficulty_step": 8})");
  expect_refused(both + R"(, "curriculum_learning": {"enabled": true, "curriculum_type": "seqlen",
                 "min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_discrete",
                 "schedule_config": {"difficulty": [8], "max_step": []}})",
                 "curriculum_learning: give the curriculum once");
}

}  // namespace
