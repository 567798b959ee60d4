// OptimizerSwapper against a plain in-memory reference: every element is updated exactly once per
// step and its master and states survive the round trips through the swap file, with and without
// pipelining, whatever the group sizes; the pool, not the model, bounds resident memory; a damaged
// swap file is an error that names it; the swap files never outlive the process, however it ends.
#include "swap/optimizer_swapper.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "temp_dir.h"

namespace deepspeed::swap {
namespace {

namespace fs = std::filesystem;

using ds_test::TempDir;

OptimizerSwapperOptions small_options(const std::string& dir, bool pipeline, int num_states) {
  OptimizerSwapperOptions o;
  o.dir = dir + "/swap";
  o.num_states = num_states;
  o.sub_group_size = 4096;  // 4 slices of 1024 floats per set
  o.pipeline = pipeline;
  o.buffer_count = (pipeline ? 3 : 1) * (1 + num_states);
  o.aio.block_size = 4096;  // several requests per piece, and slicing allowed down to 1024 floats
  return o;
}

// pipeline, num_states
class SwapperTest : public testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(SwapperTest, EveryElementUpdatedOncePerStepAndRoundTrips) {
  const auto [pipeline, num_states] = GetParam();
  TempDir dir("ds_swapper_test");
  // Sizes below, at and above a slice and a set; none a multiple of 1024 but one.
  const std::vector<int64_t> sizes = {10000, 1, 4096, 3001};
  std::vector<at::Tensor> masters, ref_master;
  std::vector<std::vector<at::Tensor>> ref_states(sizes.size());
  at::manual_seed(11);
  for (int64_t n : sizes) {
    masters.push_back(at::randn({n}));
    ref_master.push_back(masters.back().clone());
  }
  for (size_t g = 0; g < sizes.size(); ++g)
    for (int s = 0; s < num_states; ++s) ref_states[g].push_back(at::zeros({sizes[g]}));

  OptimizerSwapper swapper(small_options(dir.path(), pipeline, num_states), masters);
  EXPECT_EQ(swapper.slice_size(), 1024);
  EXPECT_EQ(swapper.slot_count(), (pipeline ? 3 : 1) * OptimizerSwapper::kSlicesPerSet);
  ASSERT_EQ(swapper.files().size(), sizes.size());

  for (int step = 1; step <= 3; ++step) {
    std::vector<at::Tensor> visits;
    for (int64_t n : sizes) visits.push_back(at::zeros({n}, at::kInt));
    swapper.step([&](size_t g, int64_t offset, const at::Tensor& master,
                     const std::vector<at::Tensor>& states) {
      ASSERT_LT(g, sizes.size());
      ASSERT_LE(master.numel(), swapper.slice_size());
      ASSERT_EQ(states.size(), static_cast<size_t>(num_states));
      visits[g].narrow(0, offset, master.numel()).add_(1);
      // A made-up optimizer whose result depends on every value coming back intact.
      for (size_t s = 0; s < states.size(); ++s) {
        ASSERT_EQ(states[s].numel(), master.numel());
        states[s].mul_(0.5).add_(master, static_cast<double>(s + 1));
      }
      master.add_(static_cast<double>(step));
    });
    for (size_t g = 0; g < sizes.size(); ++g) {
      EXPECT_TRUE(visits[g].eq(1).all().item<bool>()) << "group " << g << " step " << step;
      for (int s = 0; s < num_states; ++s)
        ref_states[g][s].mul_(0.5).add_(ref_master[g], static_cast<double>(s + 1));
      ref_master[g].add_(static_cast<double>(step));
    }
  }
  // Read everything back through one more step that changes nothing.
  std::vector<at::Tensor> got_master;
  std::vector<std::vector<at::Tensor>> got_states(sizes.size());
  for (size_t g = 0; g < sizes.size(); ++g) {
    got_master.push_back(at::full({sizes[g]}, -1.0f));
    for (int s = 0; s < num_states; ++s) got_states[g].push_back(at::full({sizes[g]}, -1.0f));
  }
  swapper.step([&](size_t g, int64_t offset, const at::Tensor& master,
                   const std::vector<at::Tensor>& states) {
    got_master[g].narrow(0, offset, master.numel()).copy_(master);
    for (size_t s = 0; s < states.size(); ++s)
      got_states[g][s].narrow(0, offset, master.numel()).copy_(states[s]);
  });
  for (size_t g = 0; g < sizes.size(); ++g) {
    EXPECT_TRUE(at::equal(got_master[g], ref_master[g])) << "group " << g;
    for (int s = 0; s < num_states; ++s)
      EXPECT_TRUE(at::equal(got_states[g][s], ref_states[g][s])) << "group " << g << " state " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SwapperTest,
                         testing::Combine(testing::Bool(), testing::Values(0, 1, 2)));

TEST(OptimizerSwapperTest, PoolNotModelBoundsResidentMemory) {
  TempDir dir("ds_swapper_test");
  OptimizerSwapperOptions o = small_options(dir.path(), /*pipeline=*/true, 2);
  OptimizerSwapper small(o, {at::zeros({5000})});
  o.dir += "_big";
  OptimizerSwapper big(o, {at::zeros({300000}), at::zeros({100000})});
  EXPECT_EQ(small.resident_bytes(), big.resident_bytes());
  EXPECT_EQ(big.resident_bytes(), 3 * 3 * 4096 * 4);  // 3 sets x (master + 2 states) x 4096 floats
  // The files hold everything, each piece's tensors padded to 4096 bytes.
  EXPECT_EQ(big.file_bytes(), 3 * (padded_bytes(300000 * 4) + padded_bytes(100000 * 4)));
  int64_t on_disk = 0;
  for (const auto& f : big.files()) on_disk += static_cast<int64_t>(fs::file_size(f));
  EXPECT_EQ(on_disk, big.file_bytes());
}

// 16-bit masters (bf16/fp16 master weights) and bf16 states (bf16_optimizer_states) are swapped in their own dtype:
// the update sees them so, every tensor of every piece starts O_DIRECT-aligned in memory (pieces of 2048 elements,
// 4096 bytes of a 16-bit tensor; file offsets are sums of padded sizes), their values round-trip exactly, and pool
// and files take their true bytes, not fp32's; with 0-2 states, pipelined or not.
TEST(OptimizerSwapperTest, SixteenBitTensorsSwapInTheirOwnDtype) {
  struct Case {
    at::ScalarType master, state;
    bool pipeline;
    int num_states;
  };
  const Case cases[] = {{at::kBFloat16, at::kFloat, false, 2},
                        {at::kBFloat16, at::kBFloat16, false, 2},
                        {at::kHalf, at::kFloat, false, 2},
                        {at::kBFloat16, at::kFloat, true, 1},
                        {at::kHalf, at::kBFloat16, true, 0}};
  for (const Case c : cases) {
    const std::string name = std::string(c10::toString(c.master)) + " masters, " + std::to_string(c.num_states) + " " +
                             c10::toString(c.state) + " states" + (c.pipeline ? ", pipelined" : "");
    TempDir dir("ds_swapper_test");
    OptimizerSwapperOptions o = small_options(dir.path(), c.pipeline, c.num_states);
    o.master_dtype = c.master;
    o.state_dtype = c.state;
    const std::vector<int64_t> sizes = {10000, 1, 3001};
    std::vector<at::Tensor> masters, ref_master;
    std::vector<std::vector<at::Tensor>> ref_states(sizes.size());
    at::manual_seed(12);
    for (size_t g = 0; g < sizes.size(); ++g) {
      ref_master.push_back(at::randn({sizes[g]}).to(c.master));
      masters.push_back(ref_master.back().to(at::kFloat));  // the engine hands fp32 copies of 16-bit values
      for (int s = 0; s < c.num_states; ++s) ref_states[g].push_back(at::zeros({sizes[g]}, c.state));
    }
    OptimizerSwapper swapper(o, masters);
    EXPECT_EQ(swapper.slice_size(), 2048) << name;
    const int64_t master_bytes = static_cast<int64_t>(c10::elementSize(c.master));
    const int64_t state_bytes = static_cast<int64_t>(c10::elementSize(c.state));
    const int sets = c.pipeline ? 3 : 1;
    EXPECT_EQ(swapper.resident_bytes(), sets * 4096 * (master_bytes + c.num_states * state_bytes)) << name;
    int64_t file_bytes = 0;
    for (int64_t n : sizes)
      for (int64_t off = 0; off < n; off += 2048) {
        const int64_t len = std::min<int64_t>(2048, n - off);
        file_bytes += padded_bytes(len * master_bytes) + c.num_states * padded_bytes(len * state_bytes);
      }
    EXPECT_EQ(swapper.file_bytes(), file_bytes) << name;
    int64_t on_disk = 0;
    for (const auto& f : swapper.files()) on_disk += static_cast<int64_t>(fs::file_size(f));
    EXPECT_EQ(on_disk, file_bytes) << name;

    auto aligned = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % kAioAlignment == 0; };
    for (int step = 1; step <= 3; ++step) {
      swapper.step([&](size_t, int64_t, const at::Tensor& master, const std::vector<at::Tensor>& states) {
        ASSERT_EQ(master.scalar_type(), c.master) << name;
        ASSERT_TRUE(aligned(master)) << name;
        ASSERT_EQ(states.size(), static_cast<size_t>(c.num_states)) << name;
        for (size_t s = 0; s < states.size(); ++s) {
          ASSERT_EQ(states[s].scalar_type(), c.state) << name;
          ASSERT_TRUE(aligned(states[s])) << name;
          states[s].mul_(0.5).add_(master, static_cast<double>(s + 1));
        }
        master.add_(static_cast<double>(step) / 8);
      });
      for (size_t g = 0; g < sizes.size(); ++g) {
        for (int s = 0; s < c.num_states; ++s)
          ref_states[g][s].mul_(0.5).add_(ref_master[g], static_cast<double>(s + 1));
        ref_master[g].add_(static_cast<double>(step) / 8);
      }
    }
    swapper.step([&](size_t g, int64_t offset, const at::Tensor& master, const std::vector<at::Tensor>& states) {
      const int64_t n = master.numel();
      EXPECT_TRUE(at::equal(master, ref_master[g].narrow(0, offset, n))) << name << ": group " << g;
      for (size_t s = 0; s < states.size(); ++s)
        EXPECT_TRUE(at::equal(states[s], ref_states[g][s].narrow(0, offset, n))) << name << ": group " << g;
    });
  }
}

// Names in `dir` (none when it does not exist).
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

TEST(OptimizerSwapperTest, SwapFilesAreUnlinkedWhileInUse) {
  TempDir dir("ds_swapper_test");
  const OptimizerSwapperOptions o = small_options(dir.path(), false, 2);
  {
    OptimizerSwapper s(o, {at::zeros({5000}), at::zeros({10})});
    ASSERT_EQ(s.file_names().size(), 2u);
    EXPECT_EQ(s.file_names()[0], o.dir + "/group0.swp");
    // Nothing in the directory (a killed process leaves nothing), yet the files are there to read.
    EXPECT_EQ(entries(o.dir), std::vector<std::string>{});
    for (const auto& f : s.files())
      EXPECT_EQ(static_cast<int64_t>(fs::file_size(f)) % kAioAlignment, 0) << f;
    int64_t on_disk = 0;
    for (const auto& f : s.files()) on_disk += static_cast<int64_t>(fs::file_size(f));
    EXPECT_EQ(on_disk, s.file_bytes());
  }
  EXPECT_EQ(entries(o.dir), std::vector<std::string>{});
}

TEST(OptimizerSwapperTest, FailedConstructionLeavesNoSwapFile) {
  TempDir dir("ds_swapper_test");
  const OptimizerSwapperOptions o = small_options(dir.path(), false, 2);
  fs::create_directories(o.dir + "/group1.swp");  // the second group's file cannot be created
  try {
    OptimizerSwapper s(o, {at::zeros({5000}), at::zeros({10})});
    FAIL() << "expected AioError";
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("group1.swp"), std::string::npos) << e.what();
  }
  // group0.swp, created before the failure, is gone.
  EXPECT_EQ(entries(o.dir), std::vector<std::string>{"group1.swp"});
}

// The child half of SwapFilesGoWhenTheProcessDies: runs only when the parent starts this binary
// with DS_SWAP_CHILD_DIR set. It builds a swapper, says so, and dies the way DS_SWAP_CHILD_MODE
// says, running no destructor.
TEST(SwapperChild, HoldsSwapFilesThenDies) {
  const char* dir = std::getenv("DS_SWAP_CHILD_DIR");
  const char* mode = std::getenv("DS_SWAP_CHILD_MODE");
  if (dir == nullptr || mode == nullptr)
    GTEST_SKIP() << "run by SwapFilesGoWhenTheProcessDies only";
  OptimizerSwapper s(small_options(dir, false, 2), {at::randn({5000}), at::randn({3000})});
  s.step([](size_t, int64_t, const at::Tensor& m, const std::vector<at::Tensor>&) { m.add_(1); });
  { std::ofstream(std::string(dir) + "/ready") << "ok"; }
  if (std::string(mode) == "sigkill") ::raise(SIGKILL);
  if (std::string(mode) == "terminate") std::terminate();  // what an uncaught error does
  std::_Exit(3);
}

TEST(OptimizerSwapperTest, SwapFilesGoWhenTheProcessDies) {
  for (const std::string mode : {"sigkill", "terminate", "exit"}) {
    SCOPED_TRACE(mode);
    TempDir dir("ds_swapper_test");
    // Everything the child needs is built before fork: between fork and exec only exec runs.
    std::vector<std::string> env_strings = {"DS_SWAP_CHILD_DIR=" + dir.path(),
                                            "DS_SWAP_CHILD_MODE=" + mode};
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    std::vector<char*> env;
    for (auto& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    std::string arg0 = "swap_test_child", filter = "--gtest_filter=SwapperChild.*";
    char* argv[] = {arg0.data(), filter.data(), nullptr};
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execve("/proc/self/exe", argv, env.data());
      std::_Exit(127);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(fs::exists(dir.file("ready")))
        << "the child did not get to hold its swap files, status " << status;
    if (mode == "sigkill") {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    } else if (mode == "terminate") {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << status;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
    }
    EXPECT_EQ(entries(dir.path() + "/swap"), std::vector<std::string>{});
  }
}

TEST(OptimizerSwapperTest, TruncatedSwapFileIsAnErrorNamingIt) {
  TempDir dir("ds_swapper_test");
  OptimizerSwapper swapper(small_options(dir.path(), true, 2), {at::randn({20000})});
  const std::string file = swapper.files().at(0);
  fs::resize_file(file, fs::file_size(file) / 2);
  int calls = 0;
  try {
    swapper.step(
        [&](size_t, int64_t, const at::Tensor&, const std::vector<at::Tensor>&) { ++calls; });
    FAIL() << "expected AioError";
  } catch (const AioError& e) {
    // Named as the user knows it, not by the /proc/self/fd path its I/O goes through.
    EXPECT_NE(std::string(e.what()).find("short read of '" + swapper.file_names().at(0) + "'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(calls, 20);  // the step stopped at the damaged piece
}

TEST(OptimizerSwapperTest, TooFewBuffersForPipeliningNamesBufferCount) {
  TempDir dir("ds_swapper_test");
  OptimizerSwapperOptions o = small_options(dir.path(), true, 2);
  o.buffer_count = 4;
  try {
    OptimizerSwapper s(o, {at::zeros({100})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("buffer_count"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deepspeed::swap
