// ds_to_fp32 end to end: synthetic ZeRO checkpoints (2 and 3 ranks, uneven splits, parameters
// straddling ranks and groups, padding) written per the contract in deepspeed/checkpoint.h, merged
// by the real tool, read back by an independent safetensors reader here, and compared with the
// original tensors. The same partitions converted to the universal layout and read back.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/deepspeed_export.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/python_pickle.h"
#include "checkpoint/universal.h"
#include "deepspeed/checkpoint.h"
#include "safetensors_reader.h"
#include "synthetic_partitions.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
using ckpt::testing::read_safetensors;
using ds_test::TempDir;
using synthetic_partitions::Original;
using synthetic_partitions::originals;
using synthetic_partitions::write_partitioned;

namespace {

void expect_merged(const std::string& out) {
  std::map<std::string, at::Tensor> merged = read_safetensors(out);
  std::vector<Original> want = originals();
  ASSERT_EQ(merged.size(), want.size() + 1);
  for (const Original& p : want) {
    ASSERT_TRUE(merged.count(p.name)) << p.name;
    EXPECT_EQ(merged[p.name].sizes(), p.value.sizes()) << p.name;
    EXPECT_TRUE(merged[p.name].equal(p.value)) << p.name;
  }
  EXPECT_TRUE(merged["norm.running_mean"].equal(at::arange(3, at::kDouble)));
}

int run_tool(const std::string& args) {
  return std::system((std::string(DS_TO_FP32_PATH) + " " + args).c_str());
}

}  // namespace

// Group 0 holds 35 + 13 = 48 elements, group 1 48 + 1 + 9 = 58 (padded to 60).
TEST(DsToFp32, TwoRanksUnevenSplitThroughTheTool) {
  TempDir tmp;
  write_partitioned(tmp.path(), "global_step3", 2, {{0, 30, 48}, {0, 50, 60}});
  std::string out = tmp.path() + "/out/model.safetensors";
  ASSERT_EQ(run_tool(tmp.path() + " " + out), 0);  // tag from `latest`
  expect_merged(out);
}

TEST(DsToFp32, ThreeRanksUnevenSplitWithExplicitTag) {
  TempDir tmp;
  // Rank 1 holds all of embed.bias's tail and the head of group 1's first parameter; rank 2 a
  // sliver.
  write_partitioned(tmp.path(), "step_x", 3, {{0, 10, 47, 48}, {0, 3, 4, 60}});
  std::string out = tmp.path() + "/merged.safetensors";
  ASSERT_EQ(run_tool(tmp.path() + " step_x " + out), 0);
  expect_merged(out);
  ckpt::ConsolidateStats stats = ckpt::consolidate_fp32(tmp.path(), "step_x", out);
  EXPECT_EQ(stats.ranks, 3);
  EXPECT_EQ(stats.tensors, 6);
  EXPECT_EQ(stats.largest_tensor_bytes, 48 * 4);
}

TEST(DsToFp32, GapInCoverageNamesTheParameter) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 2, {{0, 30, 48}, {0, 50, 60}}, "embed.weight");
  try {
    ckpt::consolidate_fp32(tmp.path(), "t", tmp.path() + "/o.safetensors");
    FAIL() << "embed.weight is not fully covered";
  } catch (const ckpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'embed.weight': elements [30, 35)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("in no rank's partition"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ckpt::default_file_system()->file_exists(tmp.path() + "/o.safetensors"));
  EXPECT_NE(run_tool(tmp.path() + " t " + tmp.path() + "/o.safetensors 2>/dev/null"), 0);
}

TEST(DsToFp32, MissingRankFileIsNamed) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 3, {{0, 10, 47, 48}, {0, 3, 4, 60}});
  ckpt::default_file_system()->remove_file(ckpt::optim_states_path(tmp.path(), "t", 1));
  try {
    ckpt::consolidate_fp32(tmp.path(), "t", tmp.path() + "/o.safetensors");
    FAIL();
  } catch (const ckpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_pp_rank_1_mp_rank_00_optim_states.pt is missing"),
              std::string::npos)
        << e.what();
  }
}

// A byte flipped in a rank file's fp32 partition after the save: ds_to_fp32 names the file and the
// record instead of writing wrong weights.
TEST(DsToFp32, FlippedByteInAPartitionIsNamed) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 2, {{0, 30, 48}, {0, 50, 60}});
  // Rank 1's group 1 holds elements [50, 60): blocks.0.ln.bias[1..8] and padding.
  const at::Tensor tail = originals()[4].value.narrow(0, 1, 8).contiguous();
  const std::string file = ckpt::optim_states_path(tmp.path(), "t", 1);
  std::vector<char> bytes = ckpt::default_file_system()->read_file(file);
  const char* pattern = static_cast<const char*>(tail.data_ptr());
  auto at = std::search(bytes.begin(), bytes.end(), pattern, pattern + tail.nbytes());
  ASSERT_NE(at, bytes.end());
  *(at + 5) ^= 0x01;
  ckpt::write_file_atomic(file, bytes.data(), bytes.size());
  const std::string out = tmp.path() + "/o.safetensors";
  try {
    ckpt::consolidate_fp32(tmp.path(), "t", out);
    FAIL() << "a damaged partition was consolidated";
  } catch (const ckpt::CheckpointCorruptError& e) {
    EXPECT_NE(
        std::string(e.what()).find("checkpoint file " + file + " is corrupt: record archive/data/"),
        std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("('fp32_flat_groups/1')"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ckpt::default_file_system()->file_exists(out));
}

// A *.pt output is torch.save's format: our loader and Python's torch.load both read the merged tensors, equal to
// the originals (parameters straddling ranks included), and the buffer keeps its dtype.
TEST(DsToFp32, TorchOutputReadsBackInLibTorchAndPython) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 3, {{0, 10, 47, 48}, {0, 3, 4, 60}});
  const std::string out = tmp.path() + "/merged.pt";
  ASSERT_EQ(run_tool(tmp.path() + " t " + out), 0);
  ckpt::StateDict merged = ckpt::load_state(out);
  const std::vector<Original> want = originals();
  ASSERT_EQ(merged.size(), want.size() + 1);
  for (const Original& p : want) {
    ASSERT_TRUE(merged.contains(p.name)) << p.name;
    EXPECT_TRUE(merged.at(p.name).toTensor().equal(p.value)) << p.name;
  }
  EXPECT_TRUE(merged.at("norm.running_mean").toTensor().equal(at::arange(3, at::kDouble)));

  const std::string python = DS_TEST_PYTHON;
  ASSERT_EQ(std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()), 0)
      << python << " cannot import torch (run scripts/setup.sh)";
  // The originals, as text Python can compare with (exact: every float32 printed with 9 significant digits).
  std::string script = tmp.path() + "/check.py";
  std::ofstream py(script);
  py << "import sys, torch\nsd = torch.load(sys.argv[1])\nwant = {\n";
  for (const Original& p : want) {
    py << "  '" << p.name << "': (" << "[";
    for (int64_t d : p.value.sizes()) py << d << ", ";
    py << "], [";
    const at::Tensor flat = p.value.reshape({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) py << std::setprecision(9) << flat[i].item<float>() << ", ";
    py << "]),\n";
  }
  py << "}\n"
        "assert sorted(sd) == sorted(list(want) + ['norm.running_mean']), list(sd)\n"
        "for name, (shape, values) in want.items():\n"
        "    t = sd[name]\n"
        "    assert t.dtype == torch.float32 and list(t.shape) == shape, (name, t.dtype, t.shape)\n"
        "    assert t.reshape(-1).tolist() == torch.tensor(values, dtype=torch.float32).tolist(), name\n"
        "assert sd['norm.running_mean'].dtype == torch.float64\n"
        "print('ok')\n";
  py.close();
  EXPECT_EQ(std::system((python + " " + script + " " + out).c_str()), 0);
}

TEST(DsToFp32, AnUnknownOutputExtensionIsRefusedBeforeAnythingIsRead) {
  TempDir tmp;  // no checkpoint at all: the output's name is checked first
  try {
    ckpt::consolidate_fp32(tmp.path(), "t", tmp.path() + "/model.npz");
    FAIL();
  } catch (const ckpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("output " + tmp.path() + "/model.npz: name it *.safetensors"),
              std::string::npos)
        << e.what();
  }
}

// The universal layout from the same synthetic partitions (3 ranks, parameters straddling them): every parameter
// whole in zero/<name>/fp32.pt, latest_universal beside the output, and read_universal gives each back as one
// fragment of its own group. Checked against the original tensors, read with the plain torch-file loader.
TEST(Universal, ThreeRanksBecomeOneFolderPerParameterAndReadBack) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 3, {{0, 20, 40, 48}, {0, 25, 50, 60}});
  const std::string out = tmp.path() + "/uni/t_universal";
  const ckpt::UniversalStats stats = ckpt::write_universal(tmp.path(), "t", out);
  EXPECT_EQ(stats.params, 5);
  EXPECT_EQ(stats.ranks, 3);
  EXPECT_EQ(ckpt::read_latest(tmp.path() + "/uni", nullptr, ckpt::kLatestUniversal), "t_universal");
  for (const Original& p : originals()) {
    const ckpt::StateDict f = ckpt::load_state(out + "/zero/" + p.name + "/fp32.pt");
    EXPECT_TRUE(f.at("param").toTensor().equal(p.value)) << p.name;
  }
  const ckpt::ForeignTag back = ckpt::read_universal(tmp.path() + "/uni", "t_universal");
  const ckpt::PartitionIndex index = ckpt::index_partitions("t_universal", back.files, back.ranks);
  ASSERT_EQ(index.params.size(), 5u);
  for (const Original& p : originals()) {
    const ckpt::SavedParam* saved = index.find(p.name);
    ASSERT_NE(saved, nullptr) << p.name;
    ASSERT_EQ(saved->fragments.size(), 1u);
    EXPECT_TRUE(saved->fragments[0].source.view(p.value.sizes()).equal(p.value)) << p.name;
  }
  // The model file came along: its buffer is there.
  EXPECT_TRUE(back.model.at(ckpt::kModuleKey).toGenericDict().contains(std::string("norm.running_mean")));
}

TEST(Universal, ANonUniversalTagIsRefusedNamingTheConversion) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 2, {{0, 24, 48}, {0, 30, 60}});
  try {
    ckpt::read_universal(tmp.path(), "t");
    FAIL();
  } catch (const ckpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a universal checkpoint (no zero/ folder): convert it with "
                                         "ds_to_universal"),
              std::string::npos)
        << e.what();
  }
}

// Our reader of DeepSpeed's tags finds in out_parent/t every weight and Adam state write_partitioned wrote.
void expect_reads_back(const std::string& out_parent, std::optional<ckpt::ForeignTag>* translated) {
  const ckpt::PartitionIndex index = ckpt::load_any_partition_index(out_parent, "t", nullptr, translated);
  const std::vector<ckpt::RankOptimizerStates> optimizers = ckpt::rank_optimizer_states(index);
  ASSERT_EQ(optimizers.at(0).names, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  for (const Original& p : originals()) {
    const ckpt::SavedParam* saved = index.find(p.name);
    ASSERT_NE(saved, nullptr) << p.name;
    at::Tensor fp32 = at::empty({saved->numel}), m = at::empty({saved->numel}), v = at::empty({saved->numel});
    ckpt::copy_param_elements(index, optimizers, *saved, 0, saved->numel, fp32, {m, v});
    EXPECT_TRUE(fp32.view(p.value.sizes()).equal(p.value)) << p.name;
    EXPECT_TRUE(m.view(p.value.sizes()).equal(p.value * 2)) << p.name;
    EXPECT_TRUE(v.view(p.value.sizes()).equal(p.value.abs() * 3)) << p.name;
  }
}

// The export to DeepSpeed's layout (checkpoint/deepspeed_export.h), read back by our reader of DeepSpeed's tags
// (checkpoint/deepspeed_tag.h, itself checked against DeepSpeed's own files): at 3 ranks no group or parameter
// divides evenly (groups of 48 and 58 elements; parameters of 13, 9 and 1), so DeepSpeed's padding at stages 1-2
// (to 2 x world) and its per-parameter ceil(numel / 3) slices at stage 3 are all
// exercised, in sub-groups of at most 15 elements; stage 0 keeps one state per parameter. Every weight and Adam state must come back where it was.
TEST(DeepSpeedExport, EveryStageAtThreeRanksReadsBackIntoTheSameWeightsAndStates) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 2, {{0, 24, 48}, {0, 30, 60}}, "", /*adam=*/true);
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string out_parent = tmp.path() + "/ds" + std::to_string(stage);
    ckpt::DeepSpeedExportOptions options;
    options.world_size = stage == 0 ? 1 : 3;
    options.zero_stage = stage;
    const ckpt::DeepSpeedExportStats stats = ckpt::write_deepspeed_tag(tmp.path(), "t", out_parent + "/t", options);
    EXPECT_EQ(stats.params, 5);
    EXPECT_EQ(stats.ranks, stage == 0 ? 0 : 3);
    EXPECT_EQ(ckpt::read_latest(out_parent), "t");
    ASSERT_TRUE(ckpt::is_python_deepspeed_tag(out_parent, "t"));
    std::optional<ckpt::ForeignTag> translated;
    expect_reads_back(out_parent, &translated);
    ASSERT_TRUE(translated.has_value());
    const ckpt::StateDict& model = translated->model;
    EXPECT_EQ(model.at("global_steps").toInt(), 5);
    EXPECT_EQ(model.at("global_samples").toInt(), 40);
    EXPECT_EQ(model.at("lr_scheduler").toGenericDict().at(std::string("last_batch_iteration")).toInt(), 4);
    EXPECT_EQ(model.at("client_state").toGenericDict().at(std::string("epoch")).toInt(), 3);
    EXPECT_TRUE(model.at(ckpt::kModuleKey).toGenericDict().contains(std::string("norm.running_mean")));
    // DeepSpeed's Adam reads its numbers from the saved group: the config's betas and eps, each group's own decay
    // and learning rate, the step.
    const c10::IValue rank0 = ckpt::load_python_torch_file(
        stage == 0 ? out_parent + "/t/mp_rank_00_model_states.pt"
                   : out_parent + "/t/zero_pp_rank_0_mp_rank_00_optim_states.pt");
    const c10::IValue opt = stage == 0 ? *ckpt::dict_get(rank0, std::string("optimizer"))
                            : *ckpt::dict_get(*ckpt::dict_get(rank0, std::string("optimizer_state_dict")),
                                              std::string(stage == 3 ? "optimizer_state_dict" : "base_optimizer_state"));
    const c10::impl::GenericList groups = ckpt::dict_get(opt, std::string("param_groups"))->toList();
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(ckpt::dict_get(groups.get(0), std::string("weight_decay"))->toDouble(), 0.05);
    EXPECT_EQ(ckpt::dict_get(groups.get(1), std::string("weight_decay"))->toDouble(), 0.0);
    EXPECT_EQ(ckpt::dict_get(groups.get(1), std::string("lr"))->toDouble(), 0.004);
    EXPECT_EQ(ckpt::dict_get(groups.get(0), std::string("eps"))->toDouble(), 1e-7);
    EXPECT_EQ(ckpt::dict_get(groups.get(0), std::string("betas"))->toTupleRef().elements()[0].toDouble(), 0.8);
    // Stage 3 cuts each group into sub-groups as DeepSpeed does (a sub-group closes once it reaches 15 elements):
    // group 0's slices 12 + 5 make one, group 1's 16 | 1 + 3 two; stages 1-2 have one partition per group.
    const size_t second = ckpt::dict_get(groups.get(1), std::string("params"))->toList().size();
    EXPECT_EQ(second, stage == 3 ? 2u : stage == 0 ? 3u : 1u);
  }
}

// zero_optimization.elastic_checkpoint in the saved config: at stages 1-2 base_optimizer_state lists each group's
// state without DeepSpeed's padding (at 3 ranks the groups of 48 and 58 elements pad to 48 and 60: the last rank's
// second group is 2 short), with base_optimizer_state_step; it reads back whole. Not at stage 3, nor at stage 1 with
// bf16 and fp32 gradient accumulation (DeepSpeed's BF16_Optimizer writes rigid files whatever the key says).
TEST(DeepSpeedExport, ElasticCheckpointsListTheGroupsStatesUnpadded) {
  // The optimizer_state_dict of the last of the 3 ranks (bf16 runs prefix their files).
  auto last_rank = [](const std::string& out_parent, const std::string& prefix = "") {
    const c10::IValue file =
        ckpt::load_python_torch_file(out_parent + "/t/" + prefix + "zero_pp_rank_2_mp_rank_00_optim_states.pt");
    return *ckpt::dict_get(file, std::string("optimizer_state_dict"));
  };
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 2, {{0, 24, 48}, {0, 30, 60}}, "", /*adam=*/true, "fp32",
                    R"("elastic_checkpoint": true, )");
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string out_parent = tmp.path() + "/ds" + std::to_string(stage);
    ckpt::DeepSpeedExportOptions options;
    options.world_size = 3;
    options.zero_stage = stage;
    EXPECT_EQ(ckpt::write_deepspeed_tag(tmp.path(), "t", out_parent + "/t", options).elastic, stage != 3);
    std::optional<ckpt::ForeignTag> translated;
    expect_reads_back(out_parent, &translated);
    const c10::IValue osd = last_rank(out_parent);
    if (stage == 3) {
      EXPECT_FALSE(ckpt::dict_get(osd, std::string("base_optimizer_state")).has_value());
      continue;
    }
    const c10::IValue base = *ckpt::dict_get(osd, std::string("base_optimizer_state"));
    ASSERT_TRUE(base.isList()) << base.tagKind();
    const c10::impl::GenericList groups = base.toList();
    const c10::impl::GenericList flats = ckpt::dict_get(osd, std::string("single_partition_of_fp32_groups"))->toList();
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(flats.get(1).toTensor().numel(), 18);  // 60 / 3 = 20, of which 2 are padding
    for (size_t g = 0; g < 2; ++g) {
      for (const char* key : {"exp_avg", "exp_avg_sq"})
        EXPECT_EQ(ckpt::dict_get(groups.get(g), std::string(key))->toTensor().numel(), flats.get(g).toTensor().numel())
            << key;
      EXPECT_EQ(ckpt::dict_get(groups.get(g), std::string("step"))->toTensor().item<double>(), 5.0);
    }
    EXPECT_EQ(ckpt::dict_get(osd, std::string("base_optimizer_state_step"))->toInt(), 5);
  }
  write_partitioned(tmp.path(), "bf16", 2, {{0, 24, 48}, {0, 30, 60}}, "", /*adam=*/true, "bf16",
                    R"("elastic_checkpoint": true, )", R"("data_types": {"grad_accum_dtype": "fp32"}, )");
  ckpt::DeepSpeedExportOptions options;
  options.world_size = 3;
  for (int stage : {1, 2}) {
    options.zero_stage = stage;
    const std::string out_parent = tmp.path() + "/bf16_" + std::to_string(stage);
    EXPECT_EQ(ckpt::write_deepspeed_tag(tmp.path(), "bf16", out_parent + "/t", options).elastic, stage == 2);
    EXPECT_EQ(ckpt::dict_get(last_rank(out_parent, "bf16_"), std::string("base_optimizer_state"))->isList(), stage == 2)
        << "stage " << stage;
  }
  // The option overrides the saved config: rigid files although the config asks for the elastic form.
  options.zero_stage = 2;
  options.elastic = false;
  ckpt::write_deepspeed_tag(tmp.path(), "bf16", tmp.path() + "/rigid/t", options);
  EXPECT_TRUE(ckpt::dict_get(last_rank(tmp.path() + "/rigid", "bf16_"), std::string("base_optimizer_state"))
                  ->isGenericDict());
}

TEST(DeepSpeedExport, WhatDeepSpeedCannotResumeIsRefusedByName) {
  TempDir tmp;
  write_partitioned(tmp.path(), "t", 2, {{0, 24, 48}, {0, 30, 60}}, "", /*adam=*/true, "fp16");
  try {
    ckpt::write_deepspeed_tag(tmp.path(), "t", tmp.path() + "/out/t");
    FAIL() << "an fp16 checkpoint was exported";
  } catch (const ckpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is fp16: only fp32 and bf16 checkpoints can be exported"),
              std::string::npos) << e.what();
  }
  write_partitioned(tmp.path(), "no_adam", 2, {{0, 24, 48}, {0, 30, 60}});
  try {
    ckpt::write_deepspeed_tag(tmp.path(), "no_adam", tmp.path() + "/out/no_adam");
    FAIL() << "a checkpoint without Adam's states was exported";
  } catch (const ckpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("only Adam/AdamW optimizer states"), std::string::npos) << e.what();
  }
}
