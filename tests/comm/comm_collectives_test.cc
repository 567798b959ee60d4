// Every collective of deepspeed::comm against a locally computed reference, on the world and on
// sub-groups, for fp32 and the other dtypes that apply, sync and async. Run by ds_add_dist_test at
// 1, 2, 3 and 4 ranks (it also runs alone as a world of one). Each rank builds every rank's input
// deterministically from the rank number.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>

#include "counting_allocator.h"
#include "deepspeed/comm.h"
#include "tolerance.h"

namespace dc = deepspeed::comm;
using dc::ReduceOp;

namespace {

const std::vector<at::ScalarType> kFloatTypes = {at::kFloat, at::kBFloat16, at::kHalf};
const std::vector<at::ScalarType> kAllTypes = {at::kFloat, at::kBFloat16, at::kHalf, at::kLong};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                                    ReduceOp::kProduct};

// Small integers, so every dtype (and every op, products included) is exact.
at::Tensor rank_input(int r, int64_t numel, int salt = 0) {
  return (at::arange(numel, at::kDouble).remainder(3) + r + 1 + salt).to(at::kDouble);
}

at::Tensor reference(const std::vector<at::Tensor>& xs, ReduceOp op) {
  at::Tensor acc = xs[0].clone();
  for (size_t i = 1; i < xs.size(); ++i) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = acc + xs[i];
        break;
      case ReduceOp::kMax:
        acc = at::maximum(acc, xs[i]);
        break;
      case ReduceOp::kMin:
        acc = at::minimum(acc, xs[i]);
        break;
      case ReduceOp::kProduct:
        acc = acc * xs[i];
        break;
    }
  }
  if (op == ReduceOp::kAvg) acc = acc / static_cast<double>(xs.size());
  return acc;
}

// The inputs are small integers, so fp32 and int64 results are exact: bit equality. A bf16/fp16 result (reduced
// in fp32, then rounded to its dtype once: an average's fraction, a product past the dtype's integers) is within
// half an ulp of the exact value, i.e. the dtype's epsilon relative to the largest value.
void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  const at::ScalarType t = got.scalar_type();
  if (t != at::kBFloat16 && t != at::kHalf) {
    EXPECT_TRUE(at::equal(g, w)) << what << "\n got " << g << "\n want " << w;
    return;
  }
  const double epsilon = t == at::kBFloat16 ? tolerance::kBf16Epsilon : tolerance::kFp16Epsilon;
  EXPECT_WITHIN(tolerance::relative_max_error(g, w), epsilon) << what << "\n got " << g << "\n want " << w;
}

std::string tag(at::ScalarType t, bool async_op) {
  return std::string(c10::toString(t)) + (async_op ? " async" : " sync");
}

class CommTest : public ::testing::Test {
 protected:
  dc::ProcessGroup world = dc::get_world_group();
  int n = world.size();
  int r = world.rank();
};

TEST_F(CommTest, WorldMatchesEnvironment) {
  EXPECT_TRUE(dc::is_initialized());
  EXPECT_EQ(dc::get_rank(), r);
  EXPECT_EQ(dc::get_world_size(), n);
  EXPECT_TRUE(world.is_member());
  EXPECT_GE(dc::get_local_rank(), 0);
}

// Documents what the running LibTorch's Gloo does natively (printed by rank 0), and holds the line: from LibTorch
// 2.11 on, Gloo has AVG, the flat all-gather and reduce-scatter and bfloat16 arithmetic, and ZeRO counts on them
// (one collective per bucket). Every collective below then runs natively, checked against its reference at 1-4
// ranks; comm_collectives_fallbacks_2procs runs them all again through the fallbacks.
TEST_F(CommTest, BackendCapabilitiesAreProbedOnce) {
  const dc::BackendCapabilities caps = dc::backend_capabilities();
  if (dc::get_rank() == 0) std::cout << "backend capabilities: " << caps.describe() << std::endl;
  EXPECT_EQ(caps.backend, "gloo");
  const auto has = [&](at::ScalarType t) {
    return std::find(caps.reduce_dtypes.begin(), caps.reduce_dtypes.end(), t) != caps.reduce_dtypes.end();
  };
  for (at::ScalarType t : {at::kFloat, at::kDouble, at::kHalf, at::kLong}) EXPECT_TRUE(has(t)) << t;
  const char* forced = std::getenv("DS_COMM_FORCE_FALLBACKS");
  if (forced != nullptr && std::string(forced) == "1") {
    EXPECT_TRUE(caps.fallbacks_forced);
    EXPECT_FALSE(caps.avg || caps.all_gather_into_tensor || caps.reduce_scatter_tensor || has(at::kBFloat16) ||
                 caps.per_owner_partitioned || caps.in_place_by_owner);
    return;
  }
  // The partitioned collectives are the native flat calls unless DS_COMM_PARTITIONED_FORM=per_owner asks for one
  // broadcast / reduce per owner.
  const char* form = std::getenv("DS_COMM_PARTITIONED_FORM");
  EXPECT_EQ(caps.per_owner_partitioned, form != nullptr && std::string(form) == "per_owner");
  // In-place calls go per owner on Gloo unless the flat form is asked for.
  EXPECT_EQ(caps.in_place_by_owner, form == nullptr || std::string(form) != "flat");
  int major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(caps.library_version.c_str(), "%d.%d", &major, &minor), 2) << caps.library_version;
  if (major > 2 || (major == 2 && minor >= 11)) {
    EXPECT_TRUE(caps.avg);
    EXPECT_TRUE(caps.all_gather_into_tensor);
    EXPECT_TRUE(caps.reduce_scatter_tensor);
    EXPECT_TRUE(has(at::kBFloat16));
  }
  // The same answer on every rank (the probe runs on each rank's private group).
  at::Tensor mine = at::tensor({int64_t{caps.avg}, int64_t{caps.all_gather_into_tensor},
                                int64_t{caps.reduce_scatter_tensor}, static_cast<int64_t>(caps.reduce_dtypes.size())});
  at::Tensor lowest = mine.clone(), highest = mine.clone();
  dc::get_world_group().all_reduce(lowest, ReduceOp::kMin);
  dc::get_world_group().all_reduce(highest, ReduceOp::kMax);
  EXPECT_TRUE(at::equal(lowest, highest));
}

TEST_F(CommTest, AllReduceSumOfRanksClosedForm) {
  for (at::ScalarType t : {at::kFloat, at::kBFloat16, at::kHalf, at::kLong, at::kDouble}) {
    for (bool async_op : {false, true}) {
      at::Tensor x = at::full({7}, r, at::TensorOptions().dtype(t));
      dc::Work w = world.all_reduce(x, ReduceOp::kSum, async_op);
      w.wait();
      EXPECT_TRUE(w.is_completed());
      expect_equal(x, at::full({7}, n * (n - 1) / 2, at::kDouble),
                   "sum of ranks " + tag(t, async_op));
    }
  }
}

TEST_F(CommTest, AllReduceEveryOpAndDtype) {
  std::vector<at::Tensor> xs;
  for (int s = 0; s < n; ++s) xs.push_back(rank_input(s, 10));
  for (ReduceOp op : kOps) {
    for (at::ScalarType t : kFloatTypes) {
      for (bool async_op : {false, true}) {
        at::Tensor x = xs[r].to(t);
        world.all_reduce(x, op, async_op).wait();
        expect_equal(x, reference(xs, op), dc::reduce_op_name(op) + " " + tag(t, async_op));
      }
    }
  }
}

TEST_F(CommTest, AllReduceNonContiguousWritesThroughView) {
  at::Tensor base = at::full({3, 4}, r + 1, at::kFloat);
  at::Tensor view = base.t();  // non-contiguous
  ASSERT_FALSE(view.is_contiguous());
  world.all_reduce(view, ReduceOp::kMax);
  expect_equal(base, at::full({3, 4}, n, at::kDouble), "max through a transposed view");
}

TEST_F(CommTest, AllReduceAvgOnIntegersIsAClearError) {
  at::Tensor x = at::ones({2}, at::kLong);
  EXPECT_THROW(world.all_reduce(x, ReduceOp::kAvg), deepspeed::CommError);
}

TEST_F(CommTest, BroadcastFromEveryRank) {
  for (int src = 0; src < n; ++src) {
    for (at::ScalarType t : kAllTypes) {
      for (bool async_op : {false, true}) {
        at::Tensor x = rank_input(r, 9).to(t);
        world.broadcast(x, src, async_op).wait();
        expect_equal(x, rank_input(src, 9),
                     "broadcast src=" + std::to_string(src) + " " + tag(t, async_op));
      }
    }
    at::Tensor base = rank_input(r, 6).view({2, 3}).to(at::kFloat).contiguous();
    world.broadcast(base.t(), src);
    expect_equal(base, rank_input(src, 6).view({2, 3}), "broadcast into a transposed view");
  }
}

TEST_F(CommTest, ReduceToEveryRoot) {
  std::vector<at::Tensor> xs;
  for (int s = 0; s < n; ++s) xs.push_back(rank_input(s, 5));
  for (int dst = 0; dst < n; ++dst) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (at::ScalarType t : kFloatTypes) {
        for (bool async_op : {false, true}) {
          at::Tensor x = xs[r].to(t);
          world.reduce(x, dst, op, async_op).wait();
          if (r == dst) {
            expect_equal(x, reference(xs, op),
                         "reduce " + dc::reduce_op_name(op) + " " + tag(t, async_op));
          }
        }
      }
    }
  }
}

TEST_F(CommTest, AllGatherIntoTensor) {
  const int64_t m = 6;
  std::vector<at::Tensor> parts;
  for (int s = 0; s < n; ++s) parts.push_back(rank_input(s, m, 10 * s));
  at::Tensor want = at::cat(parts);
  for (at::ScalarType t : kAllTypes) {
    for (bool async_op : {false, true}) {
      at::Tensor out = at::zeros({n * m}, at::TensorOptions().dtype(t));
      dc::Work w = world.all_gather_into_tensor(out, parts[r].to(t), async_op);
      w.wait();
      expect_equal(out, want, "all_gather_into_tensor " + tag(t, async_op));
    }
  }
  // A non-contiguous output (rows of a transposed buffer) and a non-contiguous input.
  at::Tensor out = at::zeros({m, n}, at::kFloat).t();
  at::Tensor in = parts[r].to(at::kFloat).view({2, 3}).t();
  world.all_gather_into_tensor(out, in);
  std::vector<at::Tensor> tparts;
  for (int s = 0; s < n; ++s) tparts.push_back(parts[s].view({2, 3}).t().reshape({-1}));
  expect_equal(out.reshape({-1}), at::cat(tparts), "all_gather_into_tensor non-contiguous");
}

// ZeRO's layout: each rank's input is its own slice of the output buffer. Whatever the form, the other slices
// arrive and the own one is left as it was.
TEST_F(CommTest, AllGatherIntoTensorFromOwnSlice) {
  const int64_t m = 9;
  for (at::ScalarType t : {at::kFloat, at::kBFloat16}) {
    at::Tensor out = at::full({n * m}, -1, at::TensorOptions().dtype(t));
    out.narrow(0, r * m, m).copy_(rank_input(r, m, 3));
    world.all_gather_into_tensor(out, out.narrow(0, r * m, m));
    std::vector<at::Tensor> parts;
    for (int s = 0; s < n; ++s) parts.push_back(rank_input(s, m, 3));
    expect_equal(out, at::cat(parts), "all_gather_into_tensor from own slice " + tag(t, false));
  }
}

// The per-owner form reduces in place on a copy: the caller's input must come back unchanged (Gloo leaves partial
// sums in a non-root's buffer), also when the output is the caller's own slice of that input.
TEST_F(CommTest, ReduceScatterLeavesInputUnchanged) {
  const int64_t m = 7;
  std::vector<at::Tensor> ins;
  for (int s = 0; s < n; ++s) ins.push_back(rank_input(s, n * m, s));
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    at::Tensor in = ins[r].to(at::kFloat);
    const at::Tensor before = in.clone();
    at::Tensor out = at::zeros({m});
    world.reduce_scatter_tensor(out, in, op);
    expect_equal(in, before, "reduce_scatter input " + dc::reduce_op_name(op));
    expect_equal(out, reference(ins, op).narrow(0, r * m, m), "reduce_scatter " + dc::reduce_op_name(op));
  }
  at::Tensor in = ins[r].to(at::kFloat);
  world.reduce_scatter_tensor(in.narrow(0, r * m, m), in, ReduceOp::kSum);
  expect_equal(in.narrow(0, r * m, m), reference(ins, ReduceOp::kSum).narrow(0, r * m, m),
               "reduce_scatter into own slice of the input");
}

// What in-place means for memory: on a backend whose flat calls stage whole-buffer copies (Gloo), the in-place
// all-gather and reduce-scatter go per owner and allocate nothing near the buffer's size. The buffer is 8 MiB; the
// bound is a quarter of it (Gloo's own transport buffers are small; a staged copy is the whole buffer).
TEST_F(CommTest, InPlaceCollectivesStageNoWholeBufferCopy) {
  if (!dc::backend_capabilities().in_place_by_owner) GTEST_SKIP() << "flat in-place calls on this backend";
  const int64_t m = (int64_t{2} << 20) / n;  // fp32 elements per rank: 8 MiB in all
  at::Tensor buf = at::full({n * m}, static_cast<float>(r + 1));
  static CountingAllocator counter;
  CountingAllocator::Scope scope(&counter);
  counter.reset_peak();
  const int64_t before = counter.live();
  world.all_gather_into_tensor(buf, buf.narrow(0, r * m, m));
  world.reduce_scatter_in_place(buf);
  const int64_t staged = counter.peak() - before;
  EXPECT_LT(staged, static_cast<int64_t>(buf.nbytes()) / 4) << "bytes allocated during the in-place collectives";
  // All-gathered: every chunk s holds s + 1; reduced: the own chunk holds n x (r + 1).
  EXPECT_TRUE(at::all(buf.narrow(0, r * m, m) == static_cast<float>(n * (r + 1))).item<bool>());
}

TEST_F(CommTest, AllGatherIntoList) {
  for (at::ScalarType t : kAllTypes) {
    std::vector<at::Tensor> outs;
    for (int s = 0; s < n; ++s) outs.push_back(at::zeros({4}, at::TensorOptions().dtype(t)));
    world.all_gather(outs, rank_input(r, 4).to(t), /*async_op=*/true).wait();
    for (int s = 0; s < n; ++s)
      expect_equal(outs[s], rank_input(s, 4), "all_gather list " + tag(t, true));
  }
}

TEST_F(CommTest, ReduceScatterTensorAndInPlaceEveryOp) {
  const int64_t m = 5;
  std::vector<at::Tensor> ins;
  for (int s = 0; s < n; ++s) ins.push_back(rank_input(s, n * m, s));
  for (ReduceOp op : kOps) {
    at::Tensor want = reference(ins, op).narrow(0, r * m, m);
    for (at::ScalarType t : kAllTypes) {
      if (op == ReduceOp::kAvg && t == at::kLong) continue;
      for (bool async_op : {false, true}) {
        at::Tensor out = at::zeros({m}, at::TensorOptions().dtype(t));
        world.reduce_scatter_tensor(out, ins[r].to(t), op, async_op).wait();
        expect_equal(out, want,
                     "reduce_scatter " + dc::reduce_op_name(op) + " " + tag(t, async_op));
        // In place on a scratch buffer: the own chunk ends up reduced.
        at::Tensor buf = ins[r].to(t);
        world.reduce_scatter_in_place(buf, op, async_op).wait();
        expect_equal(buf.narrow(0, r * m, m), want,
                     "reduce_scatter_in_place " + dc::reduce_op_name(op) + " " + tag(t, async_op));
      }
    }
  }
}

TEST_F(CommTest, AllToAllSingleEqualSplits) {
  // Rank s sends rows [2j, 2j+2) to rank j; row values encode (sender, receiver, row).
  auto block = [](int from, int to) {
    return at::arange(6, at::kDouble).view({2, 3}) + 100 * from + 10 * to;
  };
  for (at::ScalarType t : {at::kFloat, at::kLong}) {
    for (bool async_op : {false, true}) {
      std::vector<at::Tensor> send, want;
      for (int j = 0; j < n; ++j) send.push_back(block(r, j));
      for (int s = 0; s < n; ++s) want.push_back(block(s, r));
      at::Tensor out = at::zeros({2 * n, 3}, at::TensorOptions().dtype(t));
      world.all_to_all_single(out, at::cat(send).to(t), {}, {}, async_op).wait();
      expect_equal(out, at::cat(want), "all_to_all equal " + tag(t, async_op));
    }
  }
}

TEST_F(CommTest, AllToAllSingleUnevenSplits) {
  // Rank s sends (s + j + 1) rows to rank j.
  auto rows = [](int from, int to) { return int64_t{from + to + 1}; };
  auto block = [&](int from, int to) {
    return at::arange(rows(from, to) * 2, at::kDouble).view({rows(from, to), 2}) + 16 * from +
           4 * to;
  };
  for (at::ScalarType t : {at::kFloat, at::kBFloat16, at::kLong}) {
    std::vector<at::Tensor> send, want;
    std::vector<int64_t> in_splits, out_splits;
    for (int j = 0; j < n; ++j) {
      send.push_back(block(r, j));
      in_splits.push_back(rows(r, j));
    }
    for (int s = 0; s < n; ++s) {
      want.push_back(block(s, r));
      out_splits.push_back(rows(s, r));
    }
    at::Tensor w = at::cat(want);
    at::Tensor out = at::zeros(w.sizes(), at::TensorOptions().dtype(t));
    world.all_to_all_single(out, at::cat(send).to(t), out_splits, in_splits, /*async_op=*/true)
        .wait();
    expect_equal(out, w, "all_to_all uneven " + tag(t, true));
  }
  at::Tensor bad = at::zeros({3, 2});
  EXPECT_THROW(world.all_to_all_single(bad, bad, std::vector<int64_t>(n + 1, 0), {}),
               deepspeed::Error);
}

TEST_F(CommTest, SendRecvRing) {
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (at::ScalarType t : kAllTypes) {
    at::Tensor out = rank_input(r, 8).to(t);
    at::Tensor in = at::zeros({8}, at::TensorOptions().dtype(t));
    dc::Work s = world.send(out, next, /*tag=*/3, /*async_op=*/true);
    dc::Work v = world.recv(in, prev, /*tag=*/3, /*async_op=*/true);
    v.wait();
    s.wait();
    expect_equal(in, rank_input(prev, 8), "send/recv " + tag(t, true));
  }
  EXPECT_THROW(world.send(at::ones({1}), r), deepspeed::Error);
}

TEST_F(CommTest, SubGroupsOfEvenAndOddRanks) {
  std::vector<int> evens, odds;
  for (int i = 0; i < n; ++i) (i % 2 ? odds : evens).push_back(i);
  dc::ProcessGroup ge = dc::new_group(evens);
  dc::ProcessGroup go = odds.empty() ? dc::ProcessGroup() : dc::new_group(odds);
  dc::ProcessGroup mine = r % 2 ? go : ge;
  dc::ProcessGroup other = r % 2 ? ge : go;
  const std::vector<int>& members = r % 2 ? odds : evens;
  int k = static_cast<int>(members.size());

  ASSERT_TRUE(mine.is_member());
  EXPECT_EQ(mine.size(), k);
  EXPECT_EQ(mine.ranks()[mine.rank()], r);
  if (!odds.empty()) {
    EXPECT_FALSE(other.is_member());
    EXPECT_EQ(other.rank(), -1);
    EXPECT_THROW(other.all_reduce(at::ones({1})), deepspeed::CommError);
  }

  int sum = 0;
  for (int m : members) sum += m;
  for (bool async_op : {false, true}) {
    at::Tensor x = at::full({3}, r, at::kBFloat16);
    mine.all_reduce(x, ReduceOp::kSum, async_op).wait();
    expect_equal(x, at::full({3}, sum, at::kDouble), "sub-group all_reduce");
  }
  // Broadcast from the last member, given as a global rank.
  at::Tensor b = rank_input(r, 4);
  mine.broadcast(b, members.back());
  expect_equal(b, rank_input(members.back(), 4), "sub-group broadcast");

  // Gather and reduce-scatter order by group rank.
  at::Tensor gathered = at::zeros({2 * k}, at::kFloat);
  mine.all_gather_into_tensor(gathered, at::full({2}, r, at::kFloat));
  std::vector<at::Tensor> want;
  for (int m : members) want.push_back(at::full({2}, m, at::kDouble));
  expect_equal(gathered, at::cat(want), "sub-group all_gather");

  std::vector<at::Tensor> ins;
  for (int m : members) ins.push_back(rank_input(m, 2 * k));
  at::Tensor rs = at::zeros({2}, at::kFloat);
  mine.reduce_scatter_tensor(rs, rank_input(r, 2 * k).to(at::kFloat), ReduceOp::kSum, true).wait();
  expect_equal(rs, reference(ins, ReduceOp::kSum).narrow(0, 2 * mine.rank(), 2),
               "sub-group reduce_scatter");

  // The world still works after sub-group traffic.
  at::Tensor x = at::ones({1});
  world.all_reduce(x);
  expect_equal(x, at::full({1}, n, at::kDouble), "world after sub-groups");
}

TEST_F(CommTest, SequenceNumbersCountCollectivesNotP2p) {
  uint64_t before = world.sequence_number();
  world.barrier();
  at::Tensor x = at::ones({1});
  world.all_reduce(x, ReduceOp::kSum, true).wait();
  dc::barrier();
  EXPECT_EQ(world.sequence_number(), before + 3);
}

TEST_F(CommTest, ArgumentErrorsAreLocalAndClear) {
  at::Tensor out = at::zeros({n * 4 + 1});
  try {
    world.all_gather_into_tensor(out, at::zeros({4}));
    FAIL() << "expected an error";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_gather_into_tensor: output has"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(world.broadcast(at::zeros({1}), n), deepspeed::Error);
}

TEST_F(CommTest, CommsLoggerCountsOpsAndSizes) {
  dc::CommsLoggerOptions opts;
  opts.enabled = true;
  dc::configure_comms_logger(opts);
  dc::reset_comms_logger();
  for (int i = 0; i < 3; ++i) {
    at::Tensor x = at::ones({256});
    world.all_reduce(x);
  }
  at::Tensor out = at::zeros({n * 64});
  dc::Work w = world.all_gather_into_tensor(out, at::ones({64}), /*async_op=*/true);
  // Async ops are recorded at completion, so nothing yet.
  for (const dc::CommsStat& s : dc::comms_stats()) EXPECT_NE(s.op, "all_gather_into_tensor");
  w.wait();
  w.wait();  // waiting twice records once

  std::map<std::string, dc::CommsStat> by_op;
  for (const dc::CommsStat& s : dc::comms_stats()) by_op[s.op] = s;
  ASSERT_EQ(by_op.size(), 2u);
  EXPECT_EQ(by_op["all_reduce"].count, 3);
  EXPECT_EQ(by_op["all_reduce"].msg_bytes, 256 * 4);
  EXPECT_EQ(by_op["all_gather_into_tensor"].count, 1);
  EXPECT_EQ(by_op["all_gather_into_tensor"].msg_bytes, n * 64 * 4);
  const dc::CommsStat& ar = by_op["all_reduce"];
  // The stats are derived from the totals in double: a few roundings, relative.
  const double derived = tolerance::reordered(tolerance::kFp64Epsilon, 4, 1);
  EXPECT_NEAR(ar.avg_latency_ms * ar.count, ar.total_latency_ms, derived * ar.total_latency_ms);
  if (n > 1) {
    EXPECT_NEAR(ar.busbw_gbps, ar.algbw_gbps * 2.0 * (n - 1) / n, derived * ar.busbw_gbps);
  }
  std::string table = dc::log_summary(/*print=*/false);
  EXPECT_NE(table.find("all_reduce"), std::string::npos) << table;
  EXPECT_NE(table.find("1.00 KiB"), std::string::npos) << table;
  // Per-op totals: 3 all_reduces of 1 KiB moved 3 KiB.
  const size_t total = table.find("all_reduce total");
  ASSERT_NE(total, std::string::npos) << table;
  const std::string total_row = table.substr(total, table.find('\n', total) - total);
  EXPECT_NE(total_row.find("3.00 KiB        3"), std::string::npos) << total_row;
  EXPECT_NE(table.find("all_gather_into_tensor total"), std::string::npos) << table;
  // By group size: everything here ran on the world.
  std::map<std::string, dc::CommsGroupStat> by_group;
  for (const dc::CommsGroupStat& g : dc::comms_group_stats()) {
    EXPECT_EQ(g.group_size, n) << g.op;
    by_group[g.op] = g;
  }
  EXPECT_EQ(by_group["all_reduce"].bytes, 3 * 256 * 4);
  EXPECT_EQ(by_group["all_reduce"].count, 3);
  EXPECT_EQ(by_group["all_gather_into_tensor"].bytes, n * 64 * 4);

  // prof_ops restricts what is recorded.
  opts.prof_all = false;
  opts.prof_ops = {"broadcast"};
  dc::configure_comms_logger(opts);
  dc::reset_comms_logger();
  at::Tensor y = at::ones({8});
  world.all_reduce(y);
  world.broadcast(y, 0);
  std::vector<dc::CommsStat> stats = dc::comms_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].op, "broadcast");
  dc::configure_comms_logger(dc::CommsLoggerOptions{});
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dc::init_distributed();
  int rc = RUN_ALL_TESTS();
  // Ranks that failed may leave peers mid-collective; only tear down when all agree they are done.
  dc::barrier();
  dc::destroy_process_group();
  return rc;
}
