// See token_tally.h.
#include "runtime/token_tally.h"

#include <ATen/ATen.h>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"

namespace deepspeed::runtime {

TokenTally::TokenTally(const InitializeOptions& options)
    : tokens_per_sample_(options.tokens_per_sample), counting_(options.count_trained_tokens) {
  DS_CHECK(tokens_per_sample_ >= 0, "InitializeOptions::tokens_per_sample must be >= 0, got ", tokens_per_sample_);
}

void TokenTally::add(int64_t tokens) {
  DS_CHECK(counting_,
           "Engine::add_trained_tokens: set InitializeOptions::count_trained_tokens at initialize (on every rank: "
           "each step then sums the count over the data-parallel ranks)");
  DS_CHECK(tokens >= 0, "Engine::add_trained_tokens: tokens must be >= 0, got ", tokens);
  step_tokens_ += tokens;
}

int64_t TokenTally::close_step(comm::ProcessGroup& group) {
  if (!counting_) return -1;
  at::Tensor sum = at::tensor({step_tokens_}, at::kLong);
  step_tokens_ = 0;
  if (group.is_member() && group.size() > 1) group.all_reduce(sum);
  return sum.item<int64_t>();
}

}  // namespace deepspeed::runtime
