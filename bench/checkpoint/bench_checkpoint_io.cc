// bench_checkpoint_io [dir] [MB] [reps]: save_state / load_state of a dict of fp32 tensors (default
// 200 MB in 4 MB tensors) against a raw write()+fsync and read() of the same bytes, interleaved in
// one run (best of `reps`). Page cache is dropped for the file (fsync + POSIX_FADV_DONTNEED) before
// every read, on both sides.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"

namespace ckpt = deepspeed::checkpoint;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void raw_write(const std::string& path, const std::vector<at::Tensor>& tensors) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::abort();
  for (const at::Tensor& t : tensors) {
    const char* p = static_cast<const char*>(t.data_ptr());
    size_t left = t.numel() * t.element_size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n <= 0) std::abort();
      p += n;
      left -= n;
    }
  }
  if (::fsync(fd) != 0) std::abort();
  ::close(fd);
}

size_t raw_read(const std::string& path, std::vector<char>& buf) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::read(fd, buf.data() + done, buf.size() - done);
    if (n <= 0) break;
    done += n;
  }
  ::close(fd);
  return done;
}

// Reads every page of every tensor, so a mapped load pays for its I/O inside the timed region.
double touch(const ckpt::StateDict& s) {
  double sum = 0;
  for (const auto& e : s) {
    if (e.value().isTensor()) sum += e.value().toTensor().sum().item<double>();
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  int64_t mb = argc > 2 ? std::atoll(argv[2]) : 200;
  int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  const int64_t kTensorElems = 1 << 20;  // 4 MB of fp32
  int64_t count = std::max<int64_t>(1, mb * 1000 * 1000 / (kTensorElems * 4));
  ckpt::StateDict state = ckpt::make_state_dict();
  std::vector<at::Tensor> tensors;
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor t = at::rand({kTensorElems});
    tensors.push_back(t);
    state.insert("layer." + std::to_string(i) + ".weight", t);
  }
  ckpt::stamp_metadata(state, "bench");
  double bytes = static_cast<double>(count * kTensorElems * 4);
  std::string ckpt_path = dir + "/bench_ckpt_io.pt", raw_path = dir + "/bench_ckpt_io.raw";
  std::vector<char> buf(static_cast<size_t>(bytes));

  double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};  // raw write, save, raw read, load, load mmap
  double checksum = 0;
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now();
    raw_write(raw_path, tensors);
    best[0] = std::min(best[0], now() - t0);
    t0 = now();
    ckpt::save_state(ckpt_path, state);
    best[1] = std::min(best[1], now() - t0);

    drop_cache(raw_path);
    t0 = now();
    if (raw_read(raw_path, buf) != buf.size()) std::abort();
    best[2] = std::min(best[2], now() - t0);
    drop_cache(ckpt_path);
    t0 = now();
    ckpt::StateDict back = ckpt::load_state(ckpt_path);
    best[3] = std::min(best[3], now() - t0);
    drop_cache(ckpt_path);
    t0 = now();
    ckpt::StateDict mapped = ckpt::load_state(ckpt_path, ckpt::LoadOptions{/*mmap=*/true});
    checksum += touch(mapped);
    best[4] = std::min(best[4], now() - t0);
    if (!back.at("layer.0.weight").toTensor().equal(tensors[0])) std::abort();
  }
  auto gbs = [&](double s) { return bytes / s / 1e9; };
  std::printf("checkpoint io: %lld tensors, %.0f MB, best of %d, dir %s\n",
              static_cast<long long>(count), bytes / 1e6, reps, dir.c_str());
  std::printf("  write  raw write+fsync %6.2f GB/s | save_state          %6.2f GB/s | ratio %.2f\n",
              gbs(best[0]), gbs(best[1]), best[0] / best[1]);
  std::printf("  read   raw read()      %6.2f GB/s | load_state          %6.2f GB/s | ratio %.2f\n",
              gbs(best[2]), gbs(best[3]), best[2] / best[3]);
  std::printf("  read   raw read()      %6.2f GB/s | load_state mmap+sum %6.2f GB/s | ratio %.2f\n",
              gbs(best[2]), gbs(best[4]), best[2] / best[4]);
  std::printf("  (checksum %.3g)\n", checksum);
  ckpt::default_file_system()->remove_file(ckpt_path);
  ckpt::default_file_system()->remove_file(raw_path);
  return 0;
}
