// The tokens that trained, as the training loop counts them (Engine::add_trained_tokens), for the tokens/s of the
// step log, the progress bar and the monitors. samples/s x tokens_per_sample counts every position of every sample;
// where the loss skips positions (an SFT prompt's, padding: targets -100) that overstates what trained.
//
// Counting is chosen at initialize (InitializeOptions::count_trained_tokens), the same on every rank, because each
// optimizer step then sums the step's count over the data-parallel group: one all-reduce of one number.
#pragma once

#include <cstdint>

namespace deepspeed {
struct InitializeOptions;
namespace comm {
class ProcessGroup;
}
}  // namespace deepspeed

namespace deepspeed::runtime {

class TokenTally {
 public:
  TokenTally() = default;
  // Checks the options' tokens_per_sample (>= 0) and takes count_trained_tokens.
  explicit TokenTally(const InitializeOptions& options);

  int64_t tokens_per_sample() const { return tokens_per_sample_; }
  // `tokens` trained on this rank since the last call (a micro-batch's targets that the loss counts).
  void add(int64_t tokens);
  // The step's tokens summed over `group` (an all-reduce on every rank of it; the group may be null: this rank
  // alone), then the next step starts from 0. -1 when not counting: no collective.
  int64_t close_step(comm::ProcessGroup& group);

 private:
  int64_t tokens_per_sample_ = 0;
  bool counting_ = false;
  int64_t step_tokens_ = 0;
};

}  // namespace deepspeed::runtime
