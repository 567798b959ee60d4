// bench_aio [dir] [MiB] [rounds]: writes then reads one file of MiB (default 1024) through
// AioHandle in a few aio configurations, and through a plain sequential O_DIRECT pwrite/pread loop
// of the same size, in the same run, in alternation; prints the best GB/s of each and the ratio to
// the raw loop. Both sides use O_DIRECT (no page cache, so no need to drop caches) and end with
// fdatasync for writes. The read data are checked.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "swap/aio.h"

namespace ds = deepspeed::swap;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what + ": " + std::strerror(errno));
}

// The baseline: one thread, one request at a time, 8 MiB blocks (dd oflag=direct bs=8M).
double raw_seconds(char* buf, int64_t bytes, const std::string& path, bool write) {
  const int64_t block = 8 << 20;
  int fd = ::open(path.c_str(), (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_DIRECT, 0644);
  check(fd >= 0, "open " + path);
  double t0 = now_s();
  for (int64_t off = 0; off < bytes; off += block) {
    const size_t n = static_cast<size_t>(std::min(block, bytes - off));
    ssize_t got = write ? ::pwrite(fd, buf + off, n, off) : ::pread(fd, buf + off, n, off);
    check(got == static_cast<ssize_t>(n), write ? "pwrite" : "pread");
  }
  if (write) check(::fdatasync(fd) == 0, "fdatasync");
  double t = now_s() - t0;
  ::close(fd);
  return t;
}

double aio_seconds(ds::AioHandle& h, const at::Tensor& buf, const std::string& path, bool write) {
  double t0 = now_s();
  if (write) {
    h.sync_pwrite(buf, path);
    int fd = ::open(path.c_str(), O_WRONLY);
    check(fd >= 0 && ::fdatasync(fd) == 0, "fdatasync " + path);
    ::close(fd);
  } else {
    h.sync_pread(buf, path);
  }
  return now_s() - t0;
}

struct Config {
  int64_t block_size;
  int queue_depth;
  int thread_count;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string dir = argc > 1 ? argv[1] : "/tmp";
    const int64_t mib = argc > 2 ? std::stoll(argv[2]) : 1024;
    const int rounds = argc > 3 ? std::stoi(argv[3]) : 2;
    const int64_t bytes = mib << 20;
    const std::string path = dir + "/ds_bench_aio.bin";

    at::Tensor src = ds::aligned_empty(bytes, at::kByte);
    at::Tensor dst = ds::aligned_empty(bytes, at::kByte);
    auto* s = static_cast<uint64_t*>(src.data_ptr());
    for (int64_t i = 0; i < bytes / 8; ++i) s[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;

    const std::vector<Config> configs = {
        {1 << 20, 8, 1}, {8 << 20, 4, 1}, {8 << 20, 8, 1}, {8 << 20, 4, 2}};
    std::vector<double> best_write(configs.size(), 1e30), best_read(configs.size(), 1e30);
    double raw_write = 1e30, raw_read = 1e30;
    for (int r = 0; r < rounds; ++r) {
      raw_write =
          std::min(raw_write, raw_seconds(static_cast<char*>(src.data_ptr()), bytes, path, true));
      raw_read =
          std::min(raw_read, raw_seconds(static_cast<char*>(dst.data_ptr()), bytes, path, false));
      for (size_t c = 0; c < configs.size(); ++c) {
        ds::AioOptions o;
        o.block_size = configs[c].block_size;
        o.queue_depth = configs[c].queue_depth;
        o.thread_count = configs[c].thread_count;
        ds::AioHandle h(o);
        best_write[c] = std::min(best_write[c], aio_seconds(h, src, path, true));
        std::memset(dst.data_ptr(), 0, 4096);
        best_read[c] = std::min(best_read[c], aio_seconds(h, dst, path, false));
        if (std::memcmp(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(bytes)) != 0) {
          std::fprintf(stderr, "bench_aio: read-back mismatch (config %zu)\n", c);
          return 1;
        }
        if (!h.direct_io())
          std::fprintf(stderr, "bench_aio: warning: O_DIRECT was refused in %s\n", dir.c_str());
      }
    }
    ::unlink(path.c_str());

    const double gb = static_cast<double>(bytes) / 1e9;
    std::printf("file %s, %lld MiB, best of %d rounds, GB/s = 1e9 bytes/s\n", path.c_str(),
                static_cast<long long>(mib), rounds);
    std::printf("| method                      | write GB/s | vs raw | read GB/s | vs raw |\n");
    std::printf("|-----------------------------|-----------:|-------:|----------:|-------:|\n");
    std::printf("| raw O_DIRECT loop, 8 MiB    | %10.2f | %5.0f%% | %9.2f | %5.0f%% |\n",
                gb / raw_write, 100.0, gb / raw_read, 100.0);
    for (size_t c = 0; c < configs.size(); ++c) {
      char name[64];
      std::snprintf(name, sizeof(name), "aio bs %lld MiB qd %d thr %d",
                    static_cast<long long>(configs[c].block_size >> 20), configs[c].queue_depth,
                    configs[c].thread_count);
      std::printf("| %-27s | %10.2f | %5.0f%% | %9.2f | %5.0f%% |\n", name, gb / best_write[c],
                  100.0 * raw_write / best_write[c], gb / best_read[c],
                  100.0 * raw_read / best_read[c]);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_aio: %s\n", e.what());
    return 1;
  }
}
