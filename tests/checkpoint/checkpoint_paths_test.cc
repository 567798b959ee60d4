// DeepSpeed's checkpoint names, their parser, rank discovery and the `latest` pointer.
#include <gtest/gtest.h>

#include <string>

#include "deepspeed/checkpoint.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
using ds_test::TempDir;

TEST(CheckpointPaths, DeepSpeedNames) {
  EXPECT_EQ(ckpt::default_tag(1200), "global_step1200");
  EXPECT_EQ(ckpt::latest_path("/c"), "/c/latest");
  EXPECT_EQ(ckpt::model_states_path("/c", "global_step5"),
            "/c/global_step5/mp_rank_00_model_states.pt");
  EXPECT_EQ(ckpt::optim_states_path("/c", "t", 3),
            "/c/t/zero_pp_rank_3_mp_rank_00_optim_states.pt");
  EXPECT_EQ(ckpt::optim_states_path("/c", "t", 12, 1),
            "/c/t/zero_pp_rank_12_mp_rank_01_optim_states.pt");
  EXPECT_EQ(ckpt::zero_model_states_path("/c", "t", 2),
            "/c/t/zero_pp_rank_2_mp_rank_00_model_states.pt");
}

TEST(CheckpointPaths, ParseRoundTripsAndRejectsOthers) {
  using Kind = ckpt::CheckpointFileName::Kind;
  auto m = ckpt::parse_checkpoint_file_name("mp_rank_00_model_states.pt");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, Kind::kModelStates);
  EXPECT_EQ(m->dp_rank, -1);
  auto o = ckpt::parse_checkpoint_file_name("zero_pp_rank_17_mp_rank_02_optim_states.pt");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, Kind::kOptimStates);
  EXPECT_EQ(o->dp_rank, 17);
  EXPECT_EQ(o->mp_rank, 2);
  auto z = ckpt::parse_checkpoint_file_name("zero_pp_rank_1_mp_rank_00_model_states.pt");
  ASSERT_TRUE(z);
  EXPECT_EQ(z->kind, Kind::kZeroModelStates);
  for (const char* bad :
       {"latest", "mp_rank_00_model_states.pt.tmp.123", "zero_pp_rank_x_mp_rank_00_optim_states.pt",
        "mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pth", ""}) {
    EXPECT_FALSE(ckpt::parse_checkpoint_file_name(bad)) << bad;
  }
}

TEST(CheckpointPaths, ListOptimStatesFilesOrdersByRankAndNamesTheMissingOne) {
  TempDir tmp;
  ckpt::default_file_system()->create_dirs(ckpt::tag_dir(tmp.path(), "t"));
  for (int r : {2, 0, 1, 10})
    ckpt::write_file_atomic(ckpt::optim_states_path(tmp.path(), "t", r), "x", 1);
  // Not files of the tag's ranks: ignored.
  ckpt::write_file_atomic(ckpt::tag_dir(tmp.path(), "t") + "/mp_rank_00_model_states.pt", "x", 1);
  ckpt::write_file_atomic(ckpt::optim_states_path(tmp.path(), "t", 3) + ".tmp.99", "x", 1);
  try {
    ckpt::list_optim_states_files(tmp.path(), "t");
    FAIL() << "rank 3 is missing";
  } catch (const ckpt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_pp_rank_3_mp_rank_00_optim_states.pt is missing"),
              std::string::npos)
        << e.what();
  }
  ckpt::default_file_system()->remove_file(ckpt::optim_states_path(tmp.path(), "t", 10));
  auto files = ckpt::list_optim_states_files(tmp.path(), "t");
  ASSERT_EQ(files.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(files[r], ckpt::optim_states_path(tmp.path(), "t", r));
  EXPECT_THROW(ckpt::list_optim_states_files(tmp.path(), "nope"), ckpt::CheckpointError);
}

TEST(CheckpointPaths, LatestRoundTripAndErrors) {
  TempDir tmp;
  EXPECT_THROW(ckpt::read_latest(tmp.path()), ckpt::CheckpointError);
  ckpt::write_latest(tmp.path(), "global_step7");
  EXPECT_EQ(ckpt::read_latest(tmp.path()), "global_step7");
  EXPECT_EQ(ckpt::resolve_tag(tmp.path(), std::nullopt), "global_step7");
  EXPECT_EQ(ckpt::resolve_tag(tmp.path(), std::string("other")), "other");
  // DeepSpeed's Python writes `latest` without a newline; tolerate one written by hand.
  ckpt::write_file_atomic(ckpt::latest_path(tmp.path()), "step9\n", 6);
  EXPECT_EQ(ckpt::read_latest(tmp.path()), "step9");
  EXPECT_THROW(ckpt::write_latest(tmp.path(), "a/b"), deepspeed::Error);
  ckpt::write_file_atomic(ckpt::latest_path(tmp.path()), " \n", 2);
  EXPECT_THROW(ckpt::read_latest(tmp.path()), ckpt::CheckpointError);
}
