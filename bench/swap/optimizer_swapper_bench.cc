// bench_optimizer_swapper: how close ZeRO-Infinity's optimizer swapper comes to the disk.
//
//   bench_optimizer_swapper [--dir DIR] [--elements 33554432] [--sub-group 4194304] [--rounds 3]
//                           [--block-size B --queue-depth Q --thread-count T]   (the `aio` section)
//
// One group of --elements fp32 parameters with Adam's two states (three files: master, exp_avg,
// exp_avg_sq) is streamed through OptimizerSwapper::step() as a training step does, sub-group by
// sub-group through its buffer pool, with an update that touches every element: once without
// pipelining (read, update, write each sub-group in turn) and once with pipeline_read/write (read
// i+1 while updating i and writing i-1). A step reads and writes every file once, so its GB/s is
// (bytes read + bytes written) / time. The baseline, measured in the same run and interleaved with
// it, is a plain single-threaded sequential O_DIRECT pwrite then pread loop (8 MiB requests, like
// dd oflag=direct) over one file of the same total size: raw GB/s = 2 x bytes / (write + read
// time). Both sides end their writes with fdatasync. The ratio swapper / raw is the figure the
// issue asks for (target >= 80%). Files live in a fresh directory under --dir (default /tmp),
// removed at the end.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepspeed/swap/aio.h"
#include "swap/optimizer_swapper.h"

namespace ds = deepspeed::swap;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what + ": " + std::strerror(errno));
}

void sync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY);
  check(fd >= 0 && ::fdatasync(fd) == 0, "fdatasync " + path);
  ::close(fd);
}

// One sequential O_DIRECT pass over `bytes` of `path` with 8 MiB requests; returns seconds.
double raw_pass(char* buf, int64_t bytes, const std::string& path, bool write) {
  const int64_t block = 8 << 20;
  int fd = ::open(path.c_str(), (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_DIRECT, 0644);
  check(fd >= 0, "open " + path);
  const double t0 = now_s();
  for (int64_t off = 0; off < bytes; off += block) {
    const size_t n = static_cast<size_t>(std::min(block, bytes - off));
    const ssize_t got = write ? ::pwrite(fd, buf + off, n, off) : ::pread(fd, buf + off, n, off);
    check(got == static_cast<ssize_t>(n), write ? "pwrite " + path : "pread " + path);
  }
  if (write) check(::fdatasync(fd) == 0, "fdatasync " + path);
  const double t = now_s() - t0;
  ::close(fd);
  return t;
}

struct Series {
  std::vector<double> seconds;
  double best() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double median() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    const size_t n = s.size();
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  }
};

struct Swapper {
  const char* name;
  std::unique_ptr<ds::OptimizerSwapper> swapper;
  std::vector<std::string> files;
  Series times;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  int64_t elements = int64_t{32} << 20;
  int64_t sub_group = int64_t{4} << 20;
  int rounds = 3;
  ds::AioOptions aio;  // the `aio` section's defaults
  CLI::App app{"OptimizerSwapper step GB/s vs plain sequential O_DIRECT I/O of the same bytes"};
  app.add_option("--dir", dir, "directory for the swap files (a fresh subdirectory is made)");
  app.add_option("--elements", elements, "fp32 parameters in the group")
      ->check(CLI::PositiveNumber);
  app.add_option("--sub-group", sub_group, "sub_group_size in elements")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "interleaved rounds (best and median)")
      ->check(CLI::PositiveNumber);
  app.add_option("--block-size", aio.block_size, "aio.block_size (bytes)");
  app.add_option("--queue-depth", aio.queue_depth, "aio.queue_depth");
  app.add_option("--thread-count", aio.thread_count, "aio.thread_count");
  CLI11_PARSE(app, argc, argv);
  std::string work;
  try {
    std::string tmpl = dir + "/ds_bench_swapper.XXXXXX";
    check(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp in " + dir);
    work = tmpl;

    constexpr int kStates = 2;  // Adam
    const at::Tensor master = at::randn({elements});
    std::vector<Swapper> swappers;
    for (bool pipeline : {false, true}) {
      ds::OptimizerSwapperOptions o;
      o.dir = work + (pipeline ? "/pipelined" : "/sequential");
      o.num_states = kStates;
      o.sub_group_size = sub_group;
      o.pipeline = pipeline;
      o.buffer_count = (pipeline ? 3 : 1) * (1 + kStates);
      o.aio = aio;
      Swapper s{pipeline ? "swapper, pipelined (3 buffer sets)" : "swapper, sequential (1 set)",
                std::make_unique<ds::OptimizerSwapper>(o, std::vector<at::Tensor>{master}),
                {},
                {}};
      for (const char* f : {"master", "state0", "state1"})
        s.files.push_back(o.dir + "/group0_" + f + ".swp");
      swappers.push_back(std::move(s));
    }
    const int64_t file_bytes = swappers[0].swapper->file_bytes();  // all three files
    const int64_t step_bytes = 2 * file_bytes;                     // each read once, written once

    const std::string raw_path = work + "/raw.bin";
    at::Tensor raw_buf = ds::aligned_empty(file_bytes, at::kByte);
    std::memset(raw_buf.data_ptr(), 0x5A, static_cast<size_t>(file_bytes));
    Series raw_write, raw_read, raw_total;

    // Touches every element as an optimizer would (and keeps the buffers honest).
    const auto update = [](size_t, int64_t, const at::Tensor& m,
                           const std::vector<at::Tensor>& st) {
      m.add_(1.0f);
      for (const auto& t : st) t.add_(1.0f);
    };
    for (int r = 0; r < rounds; ++r) {
      const double w = raw_pass(static_cast<char*>(raw_buf.data_ptr()), file_bytes, raw_path, true);
      const double rd =
          raw_pass(static_cast<char*>(raw_buf.data_ptr()), file_bytes, raw_path, false);
      raw_write.seconds.push_back(w);
      raw_read.seconds.push_back(rd);
      raw_total.seconds.push_back(w + rd);
      for (auto& s : swappers) {
        const double t0 = now_s();
        s.swapper->step(update);
        for (const auto& f : s.files) sync_file(f);
        s.times.seconds.push_back(now_s() - t0);
      }
    }
    // The update added 1 per step to the first master element: the data really went round trip.
    for (auto& s : swappers) {
      float first = 0.0f;
      s.swapper->step(
          [&](size_t, int64_t off, const at::Tensor& m, const std::vector<at::Tensor>&) {
            if (off == 0) first = m[0].item<float>();
          });
      const float want = master[0].item<float>() + static_cast<float>(rounds);
      if (first != want)
        throw std::runtime_error(std::string(s.name) + ": master[0] is " + std::to_string(first) +
                                 " after the round trips, expected " + std::to_string(want));
    }

    const double gb = 1e-9;
    std::printf(
        "bench_optimizer_swapper: %lld fp32 params + 2 Adam states = %.1f MiB of files, sub_group "
        "%lld, aio block %lld KiB qd %d threads %d, in %s; best / median of %d interleaved rounds; "
        "GB/s = 1e9 B/s\n",
        static_cast<long long>(elements), file_bytes / 1048576.0, static_cast<long long>(sub_group),
        static_cast<long long>(aio.block_size >> 10), aio.queue_depth, aio.thread_count,
        work.c_str(), rounds);
    std::printf("  raw O_DIRECT 8 MiB loop: write %.2f GB/s, read %.2f GB/s (best)\n",
                file_bytes * gb / raw_write.best(), file_bytes * gb / raw_read.best());
    std::printf("  %-36s %10s %10s %10s %10s\n", "read+write of every file", "best GB/s",
                "med GB/s", "best x raw", "med x raw");
    std::printf("  %-36s %10.2f %10.2f %10s %10s\n", "raw write then read",
                step_bytes * gb / raw_total.best(), step_bytes * gb / raw_total.median(), "1.00",
                "1.00");
    for (const auto& s : swappers)
      std::printf("  %-36s %10.2f %10.2f %10.2f %10.2f\n", s.name, step_bytes * gb / s.times.best(),
                  step_bytes * gb / s.times.median(), raw_total.best() / s.times.best(),
                  raw_total.median() / s.times.median());
    swappers.clear();
    std::filesystem::remove_all(work);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_optimizer_swapper: %s\n", e.what());
    if (!work.empty()) std::filesystem::remove_all(work);
    return 1;
  }
}
