// The aio engine against itself and the file system: every byte written comes back, whatever the
// size, alignment, submission mode or handle; failures throw AioError naming the file.
#include "swap/aio.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "swap/aio_request.h"
#include "temp_dir.h"

namespace deepspeed::swap {
namespace {

namespace fs = std::filesystem;

using ds_test::TempDir;

at::Tensor random_tensor(int64_t numel, at::ScalarType dtype, int seed) {
  at::manual_seed(seed);
  if (dtype == at::kFloat || dtype == at::kBFloat16) return at::randn({numel}).to(dtype);
  if (dtype == at::kByte) return at::randint(0, 256, {numel}, at::TensorOptions().dtype(at::kByte));
  return at::randint(-(int64_t{1} << 40), int64_t{1} << 40, {numel},
                     at::TensorOptions().dtype(dtype));
}

// A tensor that O_DIRECT cannot use as is: its data starts 8 bytes past an aligned boundary.
at::Tensor misaligned_like(const at::Tensor& src) {
  const int64_t item = src.element_size();
  at::Tensor base = aligned_empty(src.numel() + 8 / item + 1, src.scalar_type());
  at::Tensor view = base.narrow(0, 8 / item, src.numel());
  view.copy_(src);
  return view;
}

// Bytes equal, whatever the dtype (NaN-free comparison of the raw storage).
bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

at::Tensor garbage_like(const at::Tensor& t) {
  at::Tensor out = aligned_empty(t.numel(), t.scalar_type());
  std::memset(out.data_ptr(), 0xA5, out.nbytes());
  return out;
}

struct Case {
  int64_t numel;
  at::ScalarType dtype;
};

TEST(AioTest, RoundTripAwkwardSizesAlignedAndMisaligned) {
  TempDir dir("ds_aio_test");
  AioHandle handle;
  const std::vector<Case> cases = {{1, at::kByte},
                                   {4095, at::kByte},
                                   {4096, at::kByte},
                                   {4097, at::kByte},
                                   {(3 << 20) + 5, at::kByte},
                                   {1000003, at::kFloat},
                                   {2049, at::kBFloat16},
                                   {513, at::kLong}};
  int seed = 0;
  for (const Case& c : cases) {
    for (bool misaligned : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "numel " << c.numel << " dtype " << c.dtype << " misaligned " << misaligned);
      at::Tensor src = random_tensor(c.numel, c.dtype, ++seed);
      at::Tensor out_buf = misaligned ? misaligned_like(src) : aligned_empty(c.numel, c.dtype);
      out_buf.copy_(src);
      const std::string path = dir.file("t" + std::to_string(seed));
      handle.sync_pwrite(out_buf, path);
      EXPECT_EQ(static_cast<int64_t>(fs::file_size(path)),
                padded_bytes(static_cast<int64_t>(src.nbytes())));

      at::Tensor in_buf = misaligned ? misaligned_like(at::zeros_like(src)) : garbage_like(src);
      std::memset(in_buf.data_ptr(), 0x5A, in_buf.nbytes());
      handle.async_pread(in_buf, path);
      EXPECT_EQ(handle.wait(), 1);
      EXPECT_TRUE(same_bytes(in_buf, src));
    }
  }
  EXPECT_TRUE(handle.direct_io());
}

TEST(AioTest, ReadIntoViewLeavesNeighboursUntouched) {
  TempDir dir("ds_aio_test");
  AioHandle handle;
  at::Tensor src = random_tensor(5000, at::kByte, 7);
  handle.sync_pwrite(src, dir.file("mid"));
  // A flat buffer whose middle segment starts aligned but ends mid-block, as ZeRO partitions do.
  at::Tensor flat = aligned_empty(3 * 4096 + 100, at::kByte);
  flat.fill_(0x11);
  at::Tensor middle = flat.narrow(0, 4096, 5000);
  handle.sync_pread(middle, dir.file("mid"));
  EXPECT_TRUE(same_bytes(middle, src));
  EXPECT_TRUE(flat.narrow(0, 0, 4096).eq(0x11).all().item<bool>());
  EXPECT_TRUE(flat.narrow(0, 4096 + 5000, flat.numel() - 4096 - 5000).eq(0x11).all().item<bool>());
}

// thread_count, queue_depth, single_submit, overlap_events.
class AioModesTest : public testing::TestWithParam<std::tuple<int, int, bool, bool>> {};

TEST_P(AioModesTest, ManyConcurrentRequestsWrittenByOneHandleReadByAnother) {
  TempDir dir("ds_aio_test");
  AioOptions opts;
  std::tie(opts.thread_count, opts.queue_depth, opts.single_submit, opts.overlap_events) =
      GetParam();
  opts.block_size = 64 << 10;  // many chunks per request
  const std::vector<int64_t> sizes = {1,    4095,   4097, 70000,  300001, 65536, 1 << 20, 123457,
                                      8191, 200000, 3,    131072, 99999,  4096,  555555,  12};
  std::vector<at::Tensor> srcs;
  std::vector<std::string> paths;
  std::vector<int64_t> offsets;
  {
    AioHandle writer(opts);
    int64_t shared_offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      srcs.push_back(random_tensor(sizes[i], at::kByte, 100 + static_cast<int>(i)));
      at::Tensor buf = aligned_empty(sizes[i], at::kByte);
      buf.copy_(srcs.back());
      // Even requests go to their own files; odd ones share one file at padded offsets.
      if (i % 2 == 0) {
        paths.push_back(dir.file("own" + std::to_string(i)));
        offsets.push_back(0);
      } else {
        paths.push_back(dir.file("shared"));
        offsets.push_back(shared_offset);
        shared_offset += padded_bytes(sizes[i]);
      }
      writer.async_pwrite(buf, paths.back(), offsets.back());
    }
    EXPECT_EQ(writer.wait(), static_cast<int64_t>(sizes.size()));
  }
  AioHandle reader(opts);
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    outs.push_back(garbage_like(srcs[i]));
    reader.async_pread(outs.back(), paths[i], offsets[i]);
  }
  EXPECT_EQ(reader.wait(), static_cast<int64_t>(sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(same_bytes(outs[i], srcs[i])) << "request " << i << " of " << sizes[i] << " bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AioModesTest,
                         testing::Combine(testing::Values(1, 2), testing::Values(1, 8),
                                          testing::Bool(), testing::Bool()));

TEST(AioTest, BufferedModeRoundTripsAtUnalignedOffsets) {
  TempDir dir("ds_aio_test");
  AioOptions opts;
  opts.use_direct_io = false;
  AioHandle handle(opts);
  EXPECT_FALSE(handle.direct_io());
  at::Tensor a = random_tensor(777, at::kFloat, 1);
  at::Tensor b = random_tensor(333, at::kLong, 2);
  handle.async_pwrite(a, dir.file("f"), 0);
  handle.async_pwrite(b, dir.file("f"), 777 * 4);
  handle.wait();
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir.file("f"))), 777 * 4 + 333 * 8);
  at::Tensor a2 = at::empty_like(a), b2 = at::empty_like(b);
  handle.async_pread(b2, dir.file("f"), 777 * 4);
  handle.async_pread(a2, dir.file("f"), 0);
  EXPECT_EQ(handle.wait(), 2);
  EXPECT_TRUE(same_bytes(a2, a));
  EXPECT_TRUE(same_bytes(b2, b));
}

TEST(AioTest, DirectReadOfExactLengthFileWrittenBuffered) {
  TempDir dir("ds_aio_test");
  at::Tensor src = random_tensor(5000, at::kByte, 3);
  {
    std::ofstream f(dir.file("exact"), std::ios::binary);
    f.write(static_cast<const char*>(src.data_ptr()), 5000);
  }
  AioHandle handle;
  at::Tensor out = garbage_like(src);
  handle.sync_pread(out, dir.file("exact"));
  EXPECT_TRUE(handle.direct_io());
  EXPECT_TRUE(same_bytes(out, src));
}

// A file in a fresh directory that refuses O_DIRECT: a link to /dev/zero (character devices refuse
// it with EINVAL, as tmpfs did before Linux 6.6). A fresh directory per test, since the warning is
// printed once per process and directory.
std::string zero_device_in(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  fs::create_symlink("/dev/zero", path);
  return path;
}

TEST(AioTest, FallsBackToBufferedWithOneWarningWhereODirectIsRefused) {
  TempDir dir;
  const std::string zero = zero_device_in(dir, "zero");
  AioHandle handle;
  at::Tensor out = aligned_empty(10000, at::kByte);
  out.fill_(0x77);
  testing::internal::CaptureStderr();
  handle.sync_pread(out, zero);
  handle.sync_pread(out.narrow(0, 0, 5000), zero);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(handle.direct_io());
  EXPECT_TRUE(out.eq(0).all().item<bool>());
  EXPECT_NE(err.find("O_DIRECT"), std::string::npos) << err;
  EXPECT_NE(err.find(zero), std::string::npos) << err;
  EXPECT_EQ(err.find("O_DIRECT"), err.rfind("O_DIRECT")) << "warned more than once: " << err;
}

// The optimizer swapper opens a reader and a writer handle on one folder: one warning for both,
// and one more for another folder.
TEST(AioTest, FallbackWarningOncePerDirectoryAcrossHandles) {
  TempDir dir, other;
  const std::string a = zero_device_in(dir, "a"), b = zero_device_in(dir, "b");
  const std::string c = zero_device_in(other, "c");
  AioHandle reader, writer, third;
  at::Tensor out = aligned_empty(4096, at::kByte);
  testing::internal::CaptureStderr();
  reader.sync_pread(out, a);
  writer.sync_pread(out, b);
  const std::string same_dir = testing::internal::GetCapturedStderr();
  testing::internal::CaptureStderr();
  third.sync_pread(out, c);
  const std::string other_dir = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(reader.direct_io());
  EXPECT_FALSE(writer.direct_io());
  EXPECT_NE(same_dir.find("O_DIRECT"), std::string::npos) << same_dir;
  EXPECT_EQ(same_dir.find("O_DIRECT"), same_dir.rfind("O_DIRECT"))
      << "warned more than once for one directory: " << same_dir;
  EXPECT_NE(other_dir.find(c), std::string::npos) << "no warning for another directory: " << other_dir;
}

// The optimizer swapper reaches its unlinked files as /proc/self/fd/<n>: the warning names the file
// the descriptor holds (here /dev/zero, through the link), not /proc.
TEST(AioTest, FallbackWarningNamesTheFileBehindAProcFdPath) {
  TempDir dir;
  const int fd = ::open(zero_device_in(dir, "z").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  AioHandle handle;
  at::Tensor out = aligned_empty(4096, at::kByte);
  testing::internal::CaptureStderr();
  handle.sync_pread(out, "/proc/self/fd/" + std::to_string(fd));
  const std::string err = testing::internal::GetCapturedStderr();
  ::close(fd);
  EXPECT_NE(err.find("O_DIRECT is not supported for '/dev/zero'"), std::string::npos) << err;
  EXPECT_EQ(err.find("/proc/self/fd"), std::string::npos) << err;
}

TEST(AioTest, DiskFullIsAnErrorNamingTheFile) {
  AioHandle handle;
  at::Tensor buf = random_tensor(100000, at::kByte, 4);
  handle.async_pwrite(buf, "/dev/full");  // writes to /dev/full fail with ENOSPC
  try {
    handle.wait();
    FAIL() << "expected AioError";
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("'/dev/full'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  }
  // The handle stays usable after a failed request.
  TempDir dir("ds_aio_test");
  handle.sync_pwrite(buf, dir.file("after"));
  at::Tensor back = at::empty_like(buf);
  handle.sync_pread(back, dir.file("after"));
  EXPECT_TRUE(same_bytes(back, buf));
}

TEST(AioTest, SplitRequestTilesTheFileExtentInBlockSizedChunks) {
  // An aligned tensor's whole blocks go straight from it; its partial tail through the bounce
  // buffer. Together the chunks must cover [file_offset, file_offset + padded bytes) exactly once.
  for (int64_t bytes : {int64_t{1}, int64_t{4096}, int64_t{5000}, int64_t{3 << 20} + 12345}) {
    for (int64_t block : {int64_t{4096}, int64_t{1} << 20}) {
      SCOPED_TRACE(testing::Message() << "bytes " << bytes << " block " << block);
      at::Tensor t = aligned_empty(bytes, at::kByte);
      auto r = std::make_shared<AioRequest>();
      r->user_ptr = static_cast<char*>(t.data_ptr());
      r->bytes = bytes;
      r->file_offset = 8192;
      r->direct = true;
      r->bounce_user_offset = bytes / kAioAlignment * kAioAlignment;
      r->bounce_copy_bytes = bytes - r->bounce_user_offset;
      r->bounce_bytes = padded_bytes(r->bounce_copy_bytes);
      if (r->bounce_bytes > 0) r->bounce = aligned_alloc_bytes(r->bounce_bytes);
      std::vector<AioChunk> chunks = split_request(r, block);
      EXPECT_EQ(r->pending_chunks.load(), static_cast<int64_t>(chunks.size()));
      int64_t next = r->file_offset;
      for (const AioChunk& c : chunks) {
        EXPECT_EQ(c.file_offset, next);
        EXPECT_GT(c.length, 0);
        EXPECT_LE(c.length, block);
        EXPECT_EQ(c.length % kAioAlignment, 0);
        const bool in_tensor = c.ptr >= r->user_ptr && c.ptr + c.length <= r->user_ptr + bytes;
        const bool in_bounce = r->bounce && c.ptr >= r->bounce.get() &&
                               c.ptr + c.length <= r->bounce.get() + r->bounce_bytes;
        EXPECT_TRUE(in_tensor || in_bounce) << "chunk at file offset " << c.file_offset;
        next += c.length;
      }
      EXPECT_EQ(next, r->file_offset + padded_bytes(bytes));
      r->pending_chunks = 0;  // never submitted: nothing to finalize
    }
  }
}

TEST(AioTest, WaitForCoversOnlyTheFirstRequestsAndKeepsLaterErrors) {
  TempDir dir("ds_aio_test");
  AioHandle handle;
  EXPECT_EQ(handle.submitted(), 0);
  at::Tensor buf = random_tensor(100000, at::kByte, 9);
  handle.async_pwrite(buf, dir.file("good"));
  const int64_t ticket = handle.submitted();
  EXPECT_EQ(ticket, 1);
  handle.async_pwrite(buf, "/dev/full");  // fails with ENOSPC
  EXPECT_EQ(handle.wait_for(ticket), 1);  // the good write alone: no error yet
  try {
    handle.wait();
    FAIL() << "expected the /dev/full error from wait()";
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("'/dev/full'"), std::string::npos) << e.what();
  }
  at::Tensor back = at::empty_like(buf);
  handle.sync_pread(back, dir.file("good"));
  EXPECT_TRUE(same_bytes(back, buf));
}

TEST(AioTest, WaitForReportsAFailureAmongItsRequestsOnce) {
  TempDir dir("ds_aio_test");
  AioHandle handle;
  at::Tensor buf = random_tensor(100000, at::kByte, 10);
  handle.async_pwrite(buf, "/dev/full");
  handle.async_pwrite(buf, dir.file("good"));
  try {
    handle.wait_for(1);
    FAIL() << "expected AioError";
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("'/dev/full'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(handle.wait(), 1);  // the second request; the first error was already reported
  EXPECT_EQ(handle.wait_for(0), 0);
  EXPECT_EQ(handle.wait_for(2), 0);  // nothing new to count
  at::Tensor back = at::empty_like(buf);
  handle.sync_pread(back, dir.file("good"));
  EXPECT_TRUE(same_bytes(back, buf));
  EXPECT_EQ(handle.submitted(), 3);
}

void expect_open_error(const std::function<void()>& fn, const std::string& path) {
  try {
    fn();
    FAIL() << "expected AioError for " << path;
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "'"), std::string::npos) << e.what();
  }
}

TEST(AioTest, MissingOrUnwritablePathIsAnErrorNamingIt) {
  TempDir dir("ds_aio_test");
  AioHandle handle;
  at::Tensor buf = aligned_empty(4096, at::kByte);
  const std::string missing_dir = dir.file("no_such_dir/swap.bin");
  expect_open_error([&] { handle.async_pwrite(buf, missing_dir); }, missing_dir);
  expect_open_error([&] { handle.async_pread(buf, dir.file("never_written")); },
                    dir.file("never_written"));
  { std::ofstream(dir.file("plain_file")) << "x"; }
  const std::string under_file = dir.file("plain_file/swap.bin");
  expect_open_error([&] { handle.async_pwrite(buf, under_file); }, under_file);
  fs::create_directory(dir.file("a_dir"));
  expect_open_error([&] { handle.async_pwrite(buf, dir.file("a_dir")); }, dir.file("a_dir"));
  if (geteuid() != 0) {  // root ignores permission bits
    fs::create_directory(dir.file("read_only"));
    chmod(dir.file("read_only").c_str(), 0555);
    const std::string ro = dir.file("read_only/swap.bin");
    expect_open_error([&] { handle.async_pwrite(buf, ro); }, ro);
    chmod(dir.file("read_only").c_str(), 0755);
  }
  EXPECT_EQ(handle.wait(), 0);  // nothing was queued
}

TEST(AioTest, ShortReadIsAnErrorNamingTheFile) {
  TempDir dir("ds_aio_test");
  AioOptions opts;
  opts.block_size = 8192;
  AioHandle handle(opts);
  handle.sync_pwrite(random_tensor(10000, at::kByte, 5), dir.file("short"));  // 12288 bytes on disk
  for (int64_t offset : {int64_t{0}, int64_t{8192}, int64_t{1} << 20}) {
    at::Tensor big = aligned_empty(20000, at::kByte);
    handle.async_pread(big, dir.file("short"), offset);
    try {
      handle.wait();
      FAIL() << "expected a short read at offset " << offset;
    } catch (const AioError& e) {
      EXPECT_NE(std::string(e.what()).find("short read of '" + dir.file("short") + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(AioTest, RejectsBadOptionsAndUnalignedDirectOffsets) {
  AioOptions opts;
  opts.block_size = 1000;
  try {
    AioHandle bad(opts);
    FAIL() << "expected AioError";
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1000"), std::string::npos) << e.what();
  }
  opts = AioOptions();
  opts.queue_depth = 0;
  EXPECT_THROW(AioHandle{opts}, AioError);
  opts = AioOptions();
  opts.thread_count = 0;
  EXPECT_THROW(AioHandle{opts}, AioError);

  TempDir dir("ds_aio_test");
  AioHandle handle;
  try {
    handle.async_pwrite(aligned_empty(10, at::kByte), dir.file("x"), 100);
    FAIL() << "expected AioError";
  } catch (const AioError& e) {
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.file("x")), std::string::npos) << e.what();
  }
  EXPECT_THROW(handle.async_pwrite(at::zeros({4, 4}).t(), dir.file("y")),
               AioError);  // not contiguous
}

TEST(AioTest, EmptyTensorAndAlignedEmpty) {
  TempDir dir("ds_aio_test");
  AioHandle handle;
  handle.sync_pwrite(aligned_empty(0, at::kFloat), dir.file("empty"));
  EXPECT_TRUE(fs::exists(dir.file("empty")));
  handle.sync_pread(aligned_empty(0, at::kFloat), dir.file("empty"));

  at::Tensor t = aligned_empty(1001, at::kBFloat16);
  EXPECT_EQ(t.numel(), 1001);
  EXPECT_EQ(t.scalar_type(), at::kBFloat16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kAioAlignment, 0u);
  EXPECT_GE(static_cast<int64_t>(t.storage().nbytes()), padded_bytes(1001 * 2));
  const char* tail = static_cast<const char*>(t.data_ptr()) + 1001 * 2;
  for (int64_t i = 0; i < padded_bytes(2002) - 2002; ++i)
    ASSERT_EQ(tail[i], 0) << "padding byte " << i;
}

}  // namespace
}  // namespace deepspeed::swap
