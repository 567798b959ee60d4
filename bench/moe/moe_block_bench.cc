// MoE block throughput and all-to-all traffic. Run as W ranks through the launcher:
//
//   deepspeed --num_procs 2 bench_moe_block
//
// 1. Tokens/s of forward + backward through an MoE layer of E GPT MLPs with top-1 gating (so each
// token uses the
//    parameters of one MLP) vs the dense MLP with the same active parameters, timed interleaved in
//    one process run (rounds of dense, MoE ep_size 1, MoE ep_size W) and reported as ratios to
//    dense; the MoE pays for the gate, dispatch/combine and, at ep_size W, the all-to-all.
// 2. All-to-all bytes per forward at ep_size W from the comms logger (what leaves this rank:
// (ep-1)/ep of each
//    buffer) vs the expected 2 * tokens * hidden * (ep-1)/ep elements (dispatch and return,
//    capacity factor 1 with tokens divisible by E, so the buffers hold exactly `tokens` rows).
//    Backward sends the same again.
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "deepspeed/comm.h"
#include "deepspeed/moe/layer.h"
#include "gpt_moe.h"

namespace {

using deepspeed::models::GPTConfig;
using deepspeed::models::GPTMLP;

struct Args {
  int64_t hidden = 256;
  int64_t tokens = 2048;  // per rank
  int64_t experts = 4;
  int rounds = 5;
  int reps = 3;  // timed passes per round and variant
};

deepspeed::moe::MoE make_moe(const Args& a, int64_t ep_size) {
  GPTConfig cfg;
  cfg.hidden = a.hidden;
  deepspeed::moe::MoEOptions o;
  o.hidden_size = a.hidden;
  o.num_experts = a.experts;
  o.ep_size = ep_size;
  o.k = 1;
  o.capacity_factor = 1.0;
  o.use_rts = false;
  return deepspeed::moe::MoE(o, [cfg](int64_t) { return torch::nn::AnyModule(GPTMLP(cfg)); });
}

template <typename Fn>
double time_passes(int reps, const Fn& pass) {
  deepspeed::comm::barrier();  // ranks start together: a pass with all-to-alls is as slow as its
                               // slowest rank
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) pass();
  return deepspeed::bench::seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "MoE block: tokens/s vs a dense MLP of equal active parameters, all-to-all bytes vs "
      "expected"};
  app.add_option("--hidden", a.hidden)->check(CLI::PositiveNumber);
  app.add_option("--tokens", a.tokens, "tokens per rank per pass")->check(CLI::PositiveNumber);
  app.add_option("--experts", a.experts)->check(CLI::PositiveNumber);
  app.add_option("--rounds", a.rounds)->check(CLI::PositiveNumber);
  app.add_option("--reps", a.reps)->check(CLI::PositiveNumber);
  int local_rank = 0;
  app.add_option("--local_rank", local_rank, "set by the launcher");
  CLI11_PARSE(app, argc, argv);
  deepspeed::comm::init_distributed();
  const int world = deepspeed::comm::get_world_size();
  const int rank = deepspeed::comm::get_rank();

  at::manual_seed(1);
  GPTConfig cfg;
  cfg.hidden = a.hidden;
  GPTMLP dense(cfg);
  auto moe_local = make_moe(a, 1);
  auto moe_split = make_moe(a, world);
  at::Tensor x = at::randn({a.tokens, a.hidden});
  auto dense_pass = [&] { dense->forward(x).sum().backward(); };
  auto moe_pass = [&](deepspeed::moe::MoE& m) {
    auto out = m->forward(x);
    (out.output.sum() + out.l_aux).backward();
  };

  // Warm-up, then interleaved rounds; the best round of each variant (least disturbed by the shared
  // machine).
  dense_pass();
  moe_pass(moe_local);
  moe_pass(moe_split);
  std::vector<double> best(3, 1e300);
  for (int r = 0; r < a.rounds; ++r) {
    std::vector<double> t = {time_passes(a.reps, dense_pass),
                             time_passes(a.reps, [&] { moe_pass(moe_local); }),
                             time_passes(a.reps, [&] { moe_pass(moe_split); })};
    deepspeed::bench::max_over_ranks(t);
    for (int i = 0; i < 3; ++i) best[i] = std::min(best[i], t[i]);
  }

  // All-to-all bytes of one forward at ep_size = world.
  deepspeed::comm::CommsLoggerOptions log;
  log.enabled = true;
  deepspeed::comm::configure_comms_logger(log);
  deepspeed::comm::reset_comms_logger();
  {
    at::NoGradGuard no_grad;
    moe_split->forward(x);
  }
  double sent = 0;
  for (const auto& s : deepspeed::comm::comms_stats())
    if (s.op == "all_to_all_single")
      sent += static_cast<double>(s.msg_bytes * s.count) * (world - 1) / world;
  const double expected = 2.0 * a.tokens * a.hidden * 4.0 * (world - 1) / world;

  if (rank == 0) {
    const double tok = static_cast<double>(a.tokens) * a.reps;
    std::printf(
        "ranks %d, hidden %lld, tokens/rank %lld, experts %lld, top-1, best of %d rounds x %d "
        "passes\n",
        world, static_cast<long long>(a.hidden), static_cast<long long>(a.tokens),
        static_cast<long long>(a.experts), a.rounds, a.reps);
    std::printf("dense MLP           %10.0f tokens/s per rank  1.00\n", tok / best[0]);
    std::printf("MoE ep_size 1       %10.0f tokens/s per rank  %.2f of dense\n", tok / best[1],
                best[0] / best[1]);
    std::printf("MoE ep_size %-7d %10.0f tokens/s per rank  %.2f of dense\n", world, tok / best[2],
                best[0] / best[2]);
    std::printf(
        "all-to-all bytes sent per forward: %.0f, expected 2*tokens*hidden*(ep-1)/ep*4 = %.0f "
        "(ratio %.3f)\n",
        sent, expected, expected > 0 ? sent / expected : 0.0);
  }
  return 0;
}
