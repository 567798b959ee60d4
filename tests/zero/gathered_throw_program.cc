// A stage-3 job in which rank 1 throws inside a modifying GatheredParameters scope while rank 0 reaches release()
// and waits in its broadcast. The scope's destructor on rank 1 must run no collective (and not terminate): rank 1
// ends with an error, and the launcher ends the job naming it (tests/zero/CMakeLists.txt checks the message),
// instead of rank 0 hanging. Rank 0 never gets past release(): had rank 1's destructor joined the broadcast, rank 0
// would print "rank 0 released", which fails the test.
#include <ATen/ATen.h>

#include <cstdio>
#include <exception>
#include <stdexcept>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "tiny_gpt.h"

int main() {
  try {
    deepspeed::models::GPTConfig cfg = tiny_gpt::config();
    cfg.shard_blocks = true;  // the blocks are stage-3 units
    deepspeed::models::GPT model = tiny_gpt::make_model(cfg);
    auto engine = deepspeed::initialize(
        model, deepspeed::Config::from_string(R"({"train_batch_size": 4, "zero_optimization": {"stage": 3},
                                                  "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})"));
    deepspeed::zero::GatheredParameters gathered(*model, /*modifier_rank=*/0);
    if (engine.global_rank() == 1) throw std::runtime_error("rank 1 failed inside the gathered scope on purpose");
    gathered.release();
    std::printf("rank %d released\n", engine.global_rank());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gathered_throw_program: %s\n", e.what());
    return 1;
  }
  return 0;
}
