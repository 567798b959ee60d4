// Crash safety of the write protocol: the order of file-system calls, and a save killed at many
// byte offsets leaves the previous checkpoint loadable and never a partial file under a final name.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "fault_injection_file_system.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
using ckpt::testing::FaultInjectionFileSystem;
using ckpt::testing::SimulatedCrash;
using ds_test::TempDir;

namespace {

// A small DeepSpeed-layout checkpoint: rank 0's model states, two ranks' optimizer states, then
// `latest`, in the order the engine writes them. `seed` makes each tag's contents distinct.
void save_checkpoint(const std::string& dir, const std::string& tag, int seed,
                     ckpt::FileSystem* fs) {
  ckpt::StateDict model = ckpt::make_state_dict();
  model.insert("module", at::full({64, 64}, static_cast<float>(seed)));
  model.insert("global_steps", static_cast<int64_t>(seed));
  ckpt::stamp_metadata(model, "run-1");
  ckpt::save_state(ckpt::model_states_path(dir, tag), model, fs);
  for (int r = 0; r < 2; ++r) {
    ckpt::StateDict optim = ckpt::make_state_dict();
    optim.insert("exp_avg", at::full({4096}, static_cast<float>(seed * 10 + r)));
    ckpt::stamp_metadata(optim, "run-1");
    ckpt::save_state(ckpt::optim_states_path(dir, tag, r), optim, fs);
  }
  ckpt::write_latest(dir, tag, fs);
}

void expect_checkpoint(const std::string& dir, const std::string& tag, int seed) {
  ckpt::StateDict model = ckpt::load_state(ckpt::model_states_path(dir, tag));
  ckpt::check_metadata(model, ckpt::model_states_path(dir, tag), "run-1");
  EXPECT_TRUE(model.at("module").toTensor().eq(static_cast<float>(seed)).all().item<bool>());
  for (int r = 0; r < 2; ++r) {
    ckpt::StateDict optim = ckpt::load_state(ckpt::optim_states_path(dir, tag, r));
    EXPECT_TRUE(
        optim.at("exp_avg").toTensor().eq(static_cast<float>(seed * 10 + r)).all().item<bool>());
  }
}

}  // namespace

TEST(WriteFileAtomic, WritesTemporarySyncsRenamesThenSyncsDirectory) {
  TempDir tmp;
  FaultInjectionFileSystem fs;
  std::string path = tmp.path() + "/file.pt";
  std::string data = "hello";
  ckpt::write_file_atomic(path, data.data(), data.size(), &fs);
  // <path>.tmp.<pid>.<host>: a later save can tell whether the writer still lives.
  std::string t = ckpt::temporary_path(path);
  EXPECT_EQ(t.rfind(path + ".tmp." + std::to_string(::getpid()) + ".", 0), 0u) << t;
  std::vector<std::string> want = {
      "create " + t, "append " + t + " 5",       "sync " + t,
      "close " + t,  "rename " + t + " " + path, "sync_dir " + tmp.path()};
  EXPECT_EQ(fs.log, want);
  std::vector<char> back = fs.read_file(path);
  EXPECT_EQ(std::string(back.begin(), back.end()), data);
  EXPECT_FALSE(std::filesystem::exists(t));
}

TEST(WriteFileAtomic, LatestIsRenamedAfterEveryFileOfItsTag) {
  TempDir tmp;
  FaultInjectionFileSystem fs;
  save_checkpoint(tmp.path(), "global_step1", 1, &fs);
  std::vector<std::string> renames;
  for (const std::string& op : fs.log) {
    if (op.rfind("rename ", 0) == 0) renames.push_back(op.substr(op.rfind(' ') + 1));
  }
  ASSERT_EQ(renames.size(), 4u);
  EXPECT_EQ(renames.back(), ckpt::latest_path(tmp.path()));
  // Every rename is followed by a sync of its directory before anything else is written.
  for (size_t i = 0; i < fs.log.size(); ++i) {
    if (fs.log[i].rfind("rename ", 0) == 0) {
      ASSERT_LT(i + 1, fs.log.size());
      EXPECT_EQ(fs.log[i + 1].rfind("sync_dir ", 0), 0u) << fs.log[i];
    }
  }
}

TEST(WriteFileAtomic, FailedWriteRemovesTemporaryAndKeepsOldFile) {
  TempDir tmp;
  std::string path = tmp.path() + "/file";
  ckpt::write_file_atomic(path, "old", 3);
  EXPECT_THROW(ckpt::write_file_atomic(path,
                                       [](ckpt::WritableFile& f) {
                                         f.append("new", 3);
                                         throw std::runtime_error("disk full");
                                       }),
               std::runtime_error);
  std::vector<char> back = ckpt::default_file_system()->read_file(path);
  EXPECT_EQ(std::string(back.begin(), back.end()), "old");
  EXPECT_EQ(ckpt::default_file_system()->list_dir(tmp.path()), std::vector<std::string>{"file"});
}

TEST(CrashSafety, SaveKilledAtAnyByteKeepsPreviousCheckpointLoadable) {
  // Bytes a full save of the second tag writes, measured by a save that does not crash.
  int64_t total = 0;
  {
    TempDir tmp;
    FaultInjectionFileSystem counter;
    save_checkpoint(tmp.path(), "global_step2", 2, &counter);
    total = counter.bytes_written;
  }
  ASSERT_GT(total, 3 * 16384);
  std::vector<int64_t> crash_points = {
      0, 1, 100, total / 5, total / 3, total / 2, 2 * total / 3, total - 9, total - 1};
  for (int64_t crash_at : crash_points) {
    SCOPED_TRACE("crash after " + std::to_string(crash_at) + " of " + std::to_string(total) +
                 " bytes");
    TempDir tmp;
    save_checkpoint(tmp.path(), "global_step1", 1, nullptr);
    FaultInjectionFileSystem fs(crash_at);
    EXPECT_THROW(save_checkpoint(tmp.path(), "global_step2", 2, &fs), SimulatedCrash);
    ASSERT_TRUE(fs.crashed);
    // `latest` still names the old tag, whose files all load with their values.
    EXPECT_EQ(ckpt::read_latest(tmp.path()), "global_step1");
    expect_checkpoint(tmp.path(), "global_step1", 1);
    // Whatever the new tag got: final names hold complete files only; the partial one kept its
    // temporary name.
    std::string new_dir = ckpt::tag_dir(tmp.path(), "global_step2");
    int partial = 0;
    if (std::filesystem::exists(new_dir)) {
      for (const auto& entry : std::filesystem::directory_iterator(new_dir)) {
        std::string name = entry.path().filename().string();
        if (name.find(".tmp.") != std::string::npos) {
          ++partial;
          EXPECT_FALSE(ckpt::parse_checkpoint_file_name(name).has_value()) << name;
          continue;
        }
        ASSERT_TRUE(ckpt::parse_checkpoint_file_name(name).has_value()) << name;
        ckpt::StateDict s = ckpt::load_state(entry.path().string());
        EXPECT_NO_THROW(ckpt::check_metadata(s, name, "run-1"));
      }
    }
    EXPECT_LE(partial, 1);
  }
}

TEST(CrashSafety, CompletedSaveMovesLatest) {
  TempDir tmp;
  save_checkpoint(tmp.path(), "global_step1", 1, nullptr);
  FaultInjectionFileSystem fs;
  save_checkpoint(tmp.path(), "global_step2", 2, &fs);
  EXPECT_EQ(ckpt::read_latest(tmp.path()), "global_step2");
  expect_checkpoint(tmp.path(), "global_step2", 2);
  expect_checkpoint(tmp.path(), "global_step1", 1);
}

// Issue 52: garbage in `latest` was echoed raw inside a "file is missing" message that never said `latest` was at
// fault. A tag read from it must be a plain folder name; anything else is one line naming `latest`, escaped.
TEST(Latest, GarbageIsRefusedNamingLatestWithTheBytesEscaped) {
  TempDir tmp;
  auto latest_holding = [&](const std::string& bytes) {
    std::FILE* f = std::fopen((tmp.path() + "/latest").c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    try {
      ckpt::read_latest(tmp.path());
    } catch (const ckpt::CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  const std::string prefix = tmp.path() + "/latest does not hold a checkpoint tag (";
  EXPECT_EQ(latest_holding(std::string("glob\x1b[2Jal\0x\nstep", 17)),
            prefix + "it holds a control character): 'glob\\x1b[2Jal\\x00x\\x0astep'; it should name a tag folder of " +
                tmp.path() + " (pass a tag explicitly)");
  EXPECT_EQ(latest_holding("../../etc").rfind(prefix + "it holds a '/'", 0), 0u);
  EXPECT_EQ(latest_holding("..").rfind(prefix + "'.' and '..'", 0), 0u);
  const std::string long_tag = latest_holding(std::string(300, 'g'));
  EXPECT_EQ(long_tag.rfind(prefix + "it is longer than 255 bytes", 0), 0u) << long_tag;
  EXPECT_NE(long_tag.find(std::string(80, 'g') + "...'"), std::string::npos) << long_tag;
  EXPECT_EQ(long_tag.find(std::string(81, 'g')), std::string::npos) << long_tag;
  // What save_checkpoint writes, and the same by hand with a trailing newline, are tags.
  EXPECT_EQ(latest_holding("global_step7\n"), "<accepted>");
  EXPECT_EQ(ckpt::read_latest(tmp.path()), "global_step7");
  EXPECT_EQ(latest_holding("my run (v2)"), "<accepted>");
  EXPECT_THROW(ckpt::write_latest(tmp.path(), "a\nb"), deepspeed::Error);
  EXPECT_THROW(ckpt::write_latest(tmp.path(), ".."), deepspeed::Error);
}
