// SwapFile: unlinked as soon as it is created, yet readable and writable through its io_path()
// (what AioHandle opens), gone from its directory for good, and named by its own name in messages.
#include "swap/swap_file.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "swap/aio.h"
#include "temp_dir.h"

namespace deepspeed::swap {
namespace {

namespace fs = std::filesystem;
using ds_test::TempDir;

TEST(SwapFileTest, UnlinkedAtOnceAndUsableThroughItsIoPath) {
  TempDir dir("ds_swap_file_test");
  const std::string name = dir.file("params.swp");
  std::string io;
  {
    SwapFile f(name, "zero_optimization.offload_param.nvme_path");
    ASSERT_TRUE(f.unlinked());
    EXPECT_EQ(f.name(), name);
    io = f.io_path();
    EXPECT_EQ(io, "/proc/self/fd/" + std::to_string(f.fd()));
    EXPECT_FALSE(fs::exists(name));
    EXPECT_TRUE(fs::is_empty(dir.path()));
    // A round trip through the aio engine, as the swappers do.
    AioHandle h;
    at::Tensor out = aligned_empty(3000, at::kFloat), back = aligned_empty(3000, at::kFloat);
    out.copy_(at::arange(3000, at::kFloat));
    h.sync_pwrite(out, io);
    h.sync_pread(back, io);
    EXPECT_TRUE(at::equal(back, out));
    EXPECT_EQ(f.with_name("aio: short read of '" + io + "': needed 4 bytes"),
              "aio: short read of '" + name + "' (unlinked while in use): needed 4 bytes");
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(SwapFileTest, CreationFailureNamesTheFileAndTheKey) {
  TempDir dir("ds_swap_file_test");
  try {
    SwapFile f(dir.file("no_such_dir/params.swp"), "zero_optimization.offload_param.nvme_path");
    FAIL() << "expected AioError";
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/params.swp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offload_param.nvme_path"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deepspeed::swap
