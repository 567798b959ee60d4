// What saves killed midway leave behind (temporaries, saving markers, partial tag directories) is
// removed by the next save's remove_stale_files, and nothing else: not a live writer's files, not
// another host's, not a complete checkpoint, not the one `latest` names. The kill tests run a real
// save in a child process that SIGKILLs itself at a byte budget (FaultInjectionFileSystem), in the
// spirit of LevelDB's fault-injection tests.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "fault_injection_file_system.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
namespace fs = std::filesystem;
using ckpt::testing::FaultInjectionFileSystem;
using ds_test::TempDir;

namespace {

std::string host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  std::string h = buf;
  std::replace(h.begin(), h.end(), '/', '_');
  return h;
}

// The pid of a process that has exited and been reaped.
int dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

void touch(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fclose(f);
}

std::string temp_name(const std::string& final_path, int pid, const std::string& h) {
  return final_path + ".tmp." + std::to_string(pid) + (h.empty() ? "" : "." + h);
}
std::string marker(const std::string& dir, const std::string& tag, int pid, const std::string& h) {
  return ckpt::tag_dir(dir, tag) + "/.ds_saving." + std::to_string(pid) + "." + h;
}

// The files of `tag` as an engine of `world` ranks writes them; `ranks` of them present.
void write_tag(const std::string& dir, const std::string& tag, int world, int ranks, bool model,
               ckpt::FileSystem* fs = nullptr) {
  for (int r = 0; r < ranks; ++r) {
    ckpt::StateDict s = ckpt::make_state_dict();
    s.insert(ckpt::kPartitionCountKey, static_cast<int64_t>(world));
    s.insert(ckpt::kDpRankKey, static_cast<int64_t>(r));
    s.insert("exp_avg", at::full({4096}, static_cast<float>(r)));
    ckpt::save_state(ckpt::optim_states_path(dir, tag, r), s, fs);
  }
  if (model) {
    ckpt::StateDict m = ckpt::make_state_dict();
    m.insert("global_steps", int64_t{1});
    ckpt::save_state(ckpt::model_states_path(dir, tag), m, fs);
  }
}

bool exists(const std::string& p) { return fs::exists(p); }

TEST(StaleFiles, TemporariesOfGoneWritersOfThisHostGo) {
  TempDir tmp;
  const std::string d = tmp.path();
  write_tag(d, "global_step1", 1, 1, true);
  ckpt::write_latest(d, "global_step1");
  const int gone = dead_pid(), live = static_cast<int>(::getpid());
  const std::string in_tag = ckpt::optim_states_path(d, "global_step1", 0);
  const std::vector<std::string> removed_ones = {temp_name(d + "/latest", gone, host()),
                                                 temp_name(in_tag, gone, host())};
  const std::vector<std::string> kept_ones = {
      temp_name(in_tag, live, host()),          // a live writer (this process)
      temp_name(in_tag, gone, "another-host"),  // another host's pid says nothing here
      temp_name(in_tag, gone, ""),  // no host: judged only when every writer is on this host
      d + "/notes.tmp.txt", d + "/model.tmp.12x"};  // not a temporary's name
  for (const auto& p : removed_ones) touch(p);
  for (const auto& p : kept_ones) touch(p);
  std::vector<std::string> removed = ckpt::remove_stale_files(d);
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> want = removed_ones;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(removed, want);
  for (const auto& p : removed_ones) EXPECT_FALSE(exists(p)) << p;
  for (const auto& p : kept_ones) EXPECT_TRUE(exists(p)) << p;
  EXPECT_TRUE(exists(in_tag));

  ckpt::StaleFileOptions single;
  single.single_host = true;
  EXPECT_EQ(ckpt::remove_stale_files(d, single),
            std::vector<std::string>{temp_name(in_tag, gone, "")});
}

TEST(StaleFiles, PartialTagOfAGoneWriterGoesWhateverItHolds) {
  TempDir tmp;
  const std::string d = tmp.path();
  write_tag(d, "global_step1", 2, 2, true);
  ckpt::write_latest(d, "global_step1");
  const int gone = dead_pid();
  // Rank 1's file missing; model states missing; nothing written yet but the marker.
  write_tag(d, "global_step2", 2, 1, true);
  write_tag(d, "global_step3", 2, 2, false);
  fs::create_directories(ckpt::tag_dir(d, "global_step4"));
  for (const char* t : {"global_step2", "global_step3", "global_step4"})
    touch(marker(d, t, gone, host()));
  touch(temp_name(ckpt::model_states_path(d, "global_step3"), gone, host()));
  ckpt::remove_stale_files(d);
  for (const char* t : {"global_step2", "global_step3", "global_step4"})
    EXPECT_FALSE(exists(ckpt::tag_dir(d, t))) << t;
  EXPECT_TRUE(exists(ckpt::optim_states_path(d, "global_step1", 1)));
  EXPECT_EQ(ckpt::read_latest(d), "global_step1");
}

TEST(StaleFiles, CompleteLatestLiveOrUnprovenTagsStay) {
  TempDir tmp;
  const std::string d = tmp.path();
  const int gone = dead_pid(), live = static_cast<int>(::getpid());
  // Complete, not named by latest (save_latest=false, or killed before `latest`): kept, its dead
  // marker goes.
  write_tag(d, "complete", 2, 2, true);
  touch(marker(d, "complete", gone, host()));
  // Partial, but `latest` names it.
  write_tag(d, "pointed", 2, 1, true);
  touch(marker(d, "pointed", gone, host()));
  ckpt::write_latest(d, "pointed");
  // Partial, with a live writer's marker beside the dead one's.
  write_tag(d, "live", 2, 1, true);
  touch(marker(d, "live", gone, host()));
  touch(marker(d, "live", live, host()));
  // Partial, the dead writer on another host: unknown here.
  write_tag(d, "elsewhere", 2, 1, true);
  touch(marker(d, "elsewhere", gone, "another-host"));
  // Partial with no marker: nothing says its writer died.
  write_tag(d, "unmarked", 2, 1, true);
  // Partial, but the tag being saved now.
  write_tag(d, "current", 2, 1, true);
  touch(marker(d, "current", gone, host()));
  // Partial, holding a directory of the user's.
  write_tag(d, "with_subdir", 2, 1, true);
  touch(marker(d, "with_subdir", gone, host()));
  fs::create_directories(ckpt::tag_dir(d, "with_subdir") + "/mine");

  ckpt::StaleFileOptions o;
  o.keep_tag = "current";
  ckpt::remove_stale_files(d, o);
  for (const char* t :
       {"complete", "pointed", "live", "elsewhere", "unmarked", "current", "with_subdir"}) {
    EXPECT_TRUE(exists(ckpt::optim_states_path(d, t, 0))) << t;
    EXPECT_FALSE(exists(marker(d, t, gone, host()))) << t << ": a gone writer's marker stays";
  }
  EXPECT_TRUE(exists(marker(d, "live", live, host())));
  EXPECT_TRUE(exists(marker(d, "elsewhere", gone, "another-host")));
  EXPECT_TRUE(exists(ckpt::optim_states_path(d, "complete", 1)));
}

TEST(StaleFiles, MissingDirectoryIsNothingToDo) {
  EXPECT_TRUE(ckpt::remove_stale_files("/nonexistent/ds_stale_test").empty());
}

TEST(StaleFiles, MarkerLivesExactlyAsLongAsTheSave) {
  TempDir tmp;
  const std::string d = tmp.path();
  const std::string m = marker(d, "t", static_cast<int>(::getpid()), host());
  ckpt::begin_tag_save(d, "t");
  EXPECT_TRUE(exists(m));
  // Names the parser and the loader never take for checkpoint files.
  EXPECT_FALSE(ckpt::parse_checkpoint_file_name(fs::path(m).filename().string()).has_value());
  ckpt::end_tag_save(d, "t");
  EXPECT_FALSE(exists(m));
  EXPECT_TRUE(fs::is_empty(ckpt::tag_dir(d, "t")));
}

// A save of global_step2 (two ranks' files, model states, `latest`) run in a child killed at
// `budget` bytes; then this process, as the next save would, removes the leftovers.
TEST(StaleFiles, SaveKilledAtAnyByteLeavesNothingAfterTheNextCleanup) {
  int64_t total = 0;
  {
    TempDir probe;
    FaultInjectionFileSystem counting;
    write_tag(probe.path(), "global_step2", 2, 2, true, &counting);
    total = counting.bytes_written;
  }
  ASSERT_GT(total, 2 * 4096 * 4);  // two ranks' 4096 floats, and the model states
  for (int64_t budget : {int64_t{0}, int64_t{100}, total / 3, total / 2, 2 * total / 3, total - 1,
                         total + 2, total + 100}) {
    SCOPED_TRACE("killed after " + std::to_string(budget) + " of " + std::to_string(total) +
                 " bytes");
    TempDir tmp;
    const std::string d = tmp.path();
    write_tag(d, "global_step1", 2, 2, true);
    ckpt::write_latest(d, "global_step1");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      FaultInjectionFileSystem crash(budget);
      crash.kill_process = true;
      ckpt::begin_tag_save(d, "global_step2", &crash);
      write_tag(d, "global_step2", 2, 2, true, &crash);
      ckpt::write_latest(d, "global_step2",
                         &crash);  // `latest` itself is within the budget at total + 2 only
      ckpt::end_tag_save(d, "global_step2", &crash);
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    ASSERT_TRUE(killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) << status;

    ckpt::remove_stale_files(d);
    // Nothing of a dead writer is left anywhere: no temporary, no marker.
    for (const auto& e : fs::recursive_directory_iterator(d)) {
      const std::string name = e.path().filename().string();
      EXPECT_EQ(name.find(".tmp."), std::string::npos) << e.path();
      EXPECT_EQ(name.find(".ds_saving."), std::string::npos) << e.path();
    }
    const std::string latest = ckpt::read_latest(d);
    if (latest == "global_step1") {
      // global_step2 either completed before the kill (kept) or is gone.
      const std::string t2 = ckpt::tag_dir(d, "global_step2");
      if (exists(t2)) {
        EXPECT_TRUE(exists(ckpt::model_states_path(d, "global_step2")) &&
                    exists(ckpt::optim_states_path(d, "global_step2", 1)));
      }
    } else {
      EXPECT_EQ(latest, "global_step2");
      EXPECT_FALSE(killed && budget < total) << "latest moved before every file was written";
    }
    // What latest names loads, whole.
    for (int r = 0; r < 2; ++r)
      EXPECT_NO_THROW(ckpt::load_state(ckpt::optim_states_path(d, latest, r)))
          << latest << " rank " << r;
  }
}

}  // namespace
