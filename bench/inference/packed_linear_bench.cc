// bench_packed_linear: the linear layers of one forward pass (a Llama layer's fused q/k/v, o, fused gate/up and
// down, times the layer count) through LibTorch's at::linear and through ops::PackedLinear (oneDNN on a weight
// packed once), at the row counts a serving pass has: 1 (one decode), a few (continuous batching), a prefill chunk.
// Same weights and inputs, alternated, the best of REPEATS each; prints ms per pass and the ratio.
//
//   bench_packed_linear [SHAPE=medium] [THREADS=1] [REPEATS=5] [DTYPE=fp32]
//
// SHAPE: tiny (hidden 64, 2 layers, intermediate 172, 4 / 2 heads), small (hidden 256, 4 layers, 688, 4 / 2), medium
// (hidden 1024, 8 layers, 2816, 16 / 4), 1b (Llama 3.2 1B: hidden 2048, 16 layers, 8192, 32 / 8 heads).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "deepspeed/ops/packed_linear.h"

namespace {

struct Shape {
  int64_t hidden, layers, intermediate, heads, kv_heads;
};

Shape shape_of(const std::string& name) {
  if (name == "tiny") return {64, 2, 172, 4, 2};
  if (name == "small") return {256, 4, 688, 4, 2};
  if (name == "medium") return {1024, 8, 2816, 16, 4};
  if (name == "1b") return {2048, 16, 8192, 32, 8};
  std::fprintf(stderr, "bench_packed_linear: unknown shape %s (tiny, small, medium, 1b)\n", name.c_str());
  std::exit(2);
}

template <typename F>
double best_ms(int repeats, F run) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "medium";
  at::set_num_threads(argc > 2 ? std::atoi(argv[2]) : 1);
  const int repeats = std::max(1, argc > 3 ? std::atoi(argv[3]) : 5);
  const at::ScalarType dtype = argc > 4 && std::string(argv[4]) == "bf16" ? at::kBFloat16 : at::kFloat;
  const Shape s = shape_of(name);
  // Packed at every size, so the table shows where the library's size threshold comes from (tiny: it loses).
  setenv("DS_PACKED_LINEAR", "1", 1);
  const int64_t head_dim = s.hidden / s.heads;
  const std::vector<std::pair<int64_t, int64_t>> per_layer = {
      {(s.heads + 2 * s.kv_heads) * head_dim, s.hidden},  // fused q/k/v
      {s.hidden, s.heads * head_dim},                     // o
      {2 * s.intermediate, s.hidden},                     // fused gate/up
      {s.hidden, s.intermediate}};                        // down
  at::manual_seed(0);
  std::vector<at::Tensor> weights;
  std::vector<deepspeed::ops::PackedLinear> packed;
  for (int64_t l = 0; l < s.layers; ++l) {
    for (const auto& [out, in] : per_layer) {
      weights.push_back(at::randn({out, in}).to(dtype));
      packed.emplace_back().pack(weights.back(), {});
      if (!packed.back().packed()) {
        std::fprintf(stderr, "bench_packed_linear: this LibTorch or CPU packs no %s weight\n", c10::toString(dtype));
        return 2;
      }
    }
  }
  double bytes = 0;
  for (const auto& w : weights) bytes += static_cast<double>(w.nbytes());
  std::printf("shape=%s threads=%d dtype=%s weights=%.0f MB\n", name.c_str(), at::get_num_threads(),
              c10::toString(dtype), bytes / 1e6);
  std::printf("| rows | at::linear ms | packed ms | speed-up |\n|---:|---:|---:|---:|\n");
  at::NoGradGuard no_grad;
  for (const int64_t rows : {1, 2, 4, 8, 16, 64, 256}) {
    const at::Tensor x_hidden = at::randn({rows, s.hidden}).to(dtype);
    const at::Tensor x_inner = at::randn({rows, s.intermediate}).to(dtype);
    auto input = [&](const at::Tensor& w) { return w.size(1) == s.hidden ? x_hidden : x_inner; };
    double plain = 1e30, fast = 1e30;
    for (int r = 0; r < repeats; ++r) {  // alternated, so a change in the machine's load hits both
      plain = std::min(plain, best_ms(1, [&] {
                         for (const auto& w : weights) (void)at::linear(input(w), w);
                       }));
      fast = std::min(fast, best_ms(1, [&] {
                        for (size_t i = 0; i < weights.size(); ++i) (void)packed[i](input(weights[i]));
                      }));
    }
    std::printf("| %lld | %.2f | %.2f | %.2fx |\n", static_cast<long long>(rows), plain, fast, plain / fast);
  }
  return 0;
}
