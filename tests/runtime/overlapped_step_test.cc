// OverlappedStep, the background thread of offload_optimizer.overlap_step: it runs the work, reports its error at
// wait(), and sets the thread's OpenMP count when asked (on a GPU the engine leaves the training thread a core; a
// launch that ignored the count would keep LibTorch's).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/overlapped_step.h"

namespace deepspeed::runtime {
namespace {

TEST(OverlappedStep, TheWorkerTakesTheOpenMPCountItIsGiven) {
  const int before = at::get_num_threads();
  at::set_num_threads(3);  // a count no default gives at 1 or 2 cores, so keeping LibTorch's shows
  OverlappedStep step;
  int seen = -1;
  step.launch([&] { seen = at::get_num_threads(); }, 2);
  step.wait();
  EXPECT_EQ(seen, 2);
  step.launch([&] { seen = at::get_num_threads(); });  // 0: LibTorch's count
  step.wait();
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(at::get_num_threads(), 3);  // the calling thread's own count is left alone
  at::set_num_threads(before);
}

TEST(OverlappedStep, AnErrorOfTheWorkSurfacesAtWait) {
  OverlappedStep step;
  step.launch([] { throw std::runtime_error("step failed"); }, 1);
  EXPECT_TRUE(step.pending());
  EXPECT_THROW(step.wait(), std::runtime_error);
  EXPECT_FALSE(step.pending());
}

}  // namespace
}  // namespace deepspeed::runtime
