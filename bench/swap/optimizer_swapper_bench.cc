// bench_optimizer_swapper: how close ZeRO-Infinity's optimizer swapper comes to the disk.
//
//   bench_optimizer_swapper [--dir DIR] [--elements 33554432] [--sub-group 4194304] [--rounds 7]
//                           [--block-size B --queue-depth Q --thread-count T]   (the `aio` section)
//
// One group of --elements fp32 parameters with Adam's two states (master, exp_avg, exp_avg_sq, in
// the swapper's one file per group) is streamed through OptimizerSwapper::step() as a training step
// does, with an update that touches every element, by two swappers: one buffer set (pipelining off,
// DeepSpeed's default) and three sets (pipeline_read/write). A step reads and writes every file
// once, so its GB/s is (bytes read + bytes written) / time, fdatasync of the files included.
//
// The baseline is what the disk gives for the same number of bytes with no swapper: a plain
// single-threaded sequential O_DIRECT loop (8 MiB requests, like dd iflag/oflag=direct) that reads
// one contiguous file of the same total size (beside the swap files, on the same device) whole,
// changes every float (untimed) and writes it back, then fdatasync. Both sides move random floats
// (this VM's virtual disk moves zeros and constant patterns several times faster than real data)
// and both read data written one round earlier (same cache state; O_DIRECT keeps the page cache
// out). Each round runs a swapper's step and its raw pass back to back, order alternating, and
// takes the ratio raw time / step time within the round; the median over rounds is the headline
// (issue 5's target: >= 0.80). The disk here is shared and drifts by 2x between seconds, which is
// why ratios are paired within a round. "update s" is the time inside the update callback per
// step: what a swapper that did not overlap I/O with compute would add. Files live in a fresh
// directory under --dir (default /tmp), removed at the end.
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

#include "swap/aio.h"
#include "swap/optimizer_swapper.h"

namespace ds = deepspeed::swap;

namespace {

constexpr int kStates = 2;  // Adam

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what + ": " + std::strerror(errno));
}

// One sequential O_DIRECT pass over `bytes` of `path` with 8 MiB requests; returns seconds.
double raw_pass(char* buf, int64_t bytes, const std::string& path, bool write) {
  const int64_t block = 8 << 20;
  int fd = ::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT);
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

void sync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY);
  check(fd >= 0 && ::fdatasync(fd) == 0, "fdatasync " + path);
  ::close(fd);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Touches every element as an optimizer would; states become sums of random masters, so no file
// ever holds a compressible pattern. Adds 1 to the master per call.
void fake_adam(const at::Tensor& master, const std::vector<at::Tensor>& states) {
  master.add_(1.0f);
  for (const auto& s : states) s.add_(master);
}

struct Swapper {
  const char* name = "";
  std::unique_ptr<ds::OptimizerSwapper> swapper;
  std::vector<std::string> files;
  std::vector<double> step_s, raw_s, ratio, update_s, engine_ratio;
  int updates = 0;  // steps applied to the files

  std::string raw_file;  // the baseline's file: same size, beside the swap files

  // The baseline: read the raw file whole, change every float (untimed), write it back.
  double raw_round(const at::Tensor& buf) {
    char* base = static_cast<char*>(buf.data_ptr());
    const int64_t bytes = buf.numel();
    double t = raw_pass(base, bytes, raw_file, false);
    buf.view(at::kFloat).add_(1.0f);
    t += raw_pass(base, bytes, raw_file, true);
    return t;
  }

  // The aio engine alone on the raw file, with the swapper's `aio` options: one request reads it
  // whole, one writes it back (no pieces, no overlap with compute, reads and writes apart).
  double engine_round(ds::AioHandle& handle, const at::Tensor& buf) {
    const double t0 = now_s();
    handle.sync_pread(buf, raw_file);
    buf.view(at::kFloat).add_(1.0f);
    const double t1 = now_s();
    handle.sync_pwrite(buf, raw_file);
    sync_file(raw_file);
    return now_s() - t1 + (t1 - t0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  int64_t elements = int64_t{32} << 20;
  int64_t sub_group = int64_t{4} << 20;
  int rounds = 7;
  ds::AioOptions aio;  // the `aio` section's defaults
  CLI::App app{"OptimizerSwapper step GB/s vs plain sequential O_DIRECT I/O of the same files"};
  app.add_option("--dir", dir, "directory for the swap files (a fresh subdirectory is made)");
  app.add_option("--elements", elements, "fp32 parameters in the group (a multiple of 1024)")
      ->check(CLI::PositiveNumber);
  app.add_option("--sub-group", sub_group, "sub_group_size in elements")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds (median of paired ratios)")
      ->check(CLI::PositiveNumber);
  app.add_option("--block-size", aio.block_size, "aio.block_size (bytes)");
  app.add_option("--queue-depth", aio.queue_depth, "aio.queue_depth");
  app.add_option("--thread-count", aio.thread_count, "aio.thread_count");
  CLI11_PARSE(app, argc, argv);
  if (elements % 1024 != 0) {
    std::fprintf(stderr, "bench_optimizer_swapper: --elements must be a multiple of 1024\n");
    return 2;
  }
  std::string work;
  try {
    std::string tmpl = dir + "/ds_bench_swapper.XXXXXX";
    check(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp in " + dir);
    work = tmpl;

    const at::Tensor master = at::randn({elements});
    std::vector<Swapper> swappers;
    for (bool pipeline : {false, true}) {
      ds::OptimizerSwapperOptions o;
      o.dir = work + (pipeline ? "/pipelined" : "/one_set");
      o.num_states = kStates;
      o.sub_group_size = sub_group;
      o.pipeline = pipeline;
      o.buffer_count = (pipeline ? 3 : 1) * (1 + kStates);
      o.aio = aio;
      Swapper s;
      s.name = pipeline ? "swapper, pipelined (3 buffer sets)" : "swapper, pipeline off (1 set)";
      s.swapper = std::make_unique<ds::OptimizerSwapper>(o, std::vector<at::Tensor>{master});
      s.files = s.swapper->files();
      swappers.push_back(std::move(s));
    }
    const int64_t file_bytes = swappers[0].swapper->file_bytes();  // all three files
    const int64_t step_bytes = 2 * file_bytes;                     // each read once, written once
    at::Tensor raw_buf = ds::aligned_empty(file_bytes, at::kByte);
    raw_buf.view(at::kFloat).copy_(at::randn({file_bytes / 4}));
    for (auto& s : swappers) {
      s.raw_file = s.swapper->file_names().front() + ".raw";
      int fd = ::open(s.raw_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      check(fd >= 0, "create " + s.raw_file);
      ::close(fd);
      raw_pass(static_cast<char*>(raw_buf.data_ptr()), file_bytes, s.raw_file, true);
    }

    double update_seconds = 0.0;
    const auto update = [&](size_t, int64_t, const at::Tensor& m,
                            const std::vector<at::Tensor>& st) {
      const double t0 = now_s();
      fake_adam(m, st);
      update_seconds += now_s() - t0;
    };
    ds::AioHandle engine(aio);
    // One untimed step each, so no timed pass reads the all-zero initial states.
    for (auto& s : swappers) {
      s.swapper->step(update);
      ++s.updates;
    }
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < swappers.size(); ++k) {
        Swapper& s = swappers[(static_cast<size_t>(r) + k) % swappers.size()];
        double raw = 0.0, step = 0.0;
        for (int half = 0; half < 2; ++half) {
          if ((half == 0) == (r % 2 == 0)) {
            raw = s.raw_round(raw_buf);
            continue;
          }
          update_seconds = 0.0;
          const double t0 = now_s();
          s.swapper->step(update);
          for (const auto& f : s.files) sync_file(f);
          step = now_s() - t0;
          s.update_s.push_back(update_seconds);
          ++s.updates;
        }
        s.engine_ratio.push_back(raw / s.engine_round(engine, raw_buf));
        s.raw_s.push_back(raw);
        s.step_s.push_back(step);
        s.ratio.push_back(raw / step);
      }
    }
    // Every step added 1 to the first master element: the data went round trip.
    for (auto& s : swappers) {
      float first = 0.0f;
      s.swapper->step(
          [&](size_t, int64_t off, const at::Tensor& m, const std::vector<at::Tensor>&) {
            if (off == 0) first = m[0].item<float>();
          });
      const float want = master[0].item<float>() + static_cast<float>(s.updates);
      if (std::abs(first - want) > 1e-3f * std::max(1.0f, std::abs(want)))
        throw std::runtime_error(std::string(s.name) + ": master[0] is " + std::to_string(first) +
                                 " after the round trips, expected " + std::to_string(want));
    }

    const double gb = 1e-9 * static_cast<double>(step_bytes);
    std::printf(
        "bench_optimizer_swapper: %lld fp32 params + 2 Adam states = %.1f MiB of files, sub_group "
        "%lld, aio block %lld KiB qd %d threads %d, in %s; %d rounds; GB/s = 1e9 B/s\n",
        static_cast<long long>(elements), file_bytes / 1048576.0, static_cast<long long>(sub_group),
        static_cast<long long>(aio.block_size >> 10), aio.queue_depth, aio.thread_count,
        work.c_str(), rounds);
    std::printf("  %-36s %9s %9s %9s %9s %9s %9s %9s %12s\n", "read+write of every file",
                "raw GB/s", "step GB/s", "x raw med", "x raw min", "x raw max", "update s", "slots",
                "engine x raw");
    for (const auto& s : swappers) {
      char slots[32];
      std::snprintf(slots, sizeof(slots), "%dx%lldK", s.swapper->slot_count(),
                    static_cast<long long>(s.swapper->slice_size() >> 10));
      std::printf("  %-36s %9.2f %9.2f %9.2f %9.2f %9.2f %9.3f %9s %12.2f\n", s.name,
                  gb / median_of(s.raw_s), gb / median_of(s.step_s), median_of(s.ratio),
                  *std::min_element(s.ratio.begin(), s.ratio.end()),
                  *std::max_element(s.ratio.begin(), s.ratio.end()), median_of(s.update_s), slots,
                  median_of(s.engine_ratio));
    }
    swappers.clear();
    std::filesystem::remove_all(work);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_optimizer_swapper: %s\n", e.what());
    if (!work.empty()) std::filesystem::remove_all(work);
    return 1;
  }
}
