// A training job in which rank 1's optimizer throws inside engine.step() at its third step, while rank 0 goes on
// to the next backward and blocks in the gradient all-reduce. The launcher must stop the job and exit non-zero
// (tests/runtime/CMakeLists.txt checks its message), instead of leaving rank 0 hanging.
#include <torch/optim/sgd.h>

#include <cstdio>
#include <exception>
#include <stdexcept>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "gpt.h"

namespace {

class FailingSgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  at::Tensor step(LossClosure closure = nullptr) override {
    if (++calls_ == 3 && deepspeed::comm::get_rank() == 1) throw std::runtime_error("optimizer blew up on purpose");
    return torch::optim::SGD::step(closure);
  }

 private:
  int calls_ = 0;
};

}  // namespace

int main() {
  try {
    deepspeed::models::GPTConfig cfg;
    cfg.vocab_size = 32;
    cfg.seq_len = 8;
    cfg.layers = 1;
    cfg.hidden = 16;
    cfg.heads = 2;
    at::manual_seed(0);
    deepspeed::models::GPT model(cfg);
    deepspeed::InitializeOptions options;
    options.optimizer = std::make_shared<FailingSgd>(model->parameters(), torch::optim::SGDOptions(0.1));
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(R"({"train_batch_size": 4})"),
                                        options);
    at::Tensor tokens = at::randint(32, {4 / engine.world_size(), 9}, at::kLong);
    for (int step = 0; step < 100; ++step) {
      engine.backward(engine.forward(tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8)));
      engine.step();
    }
    std::printf("rank %d finished all steps\n", engine.global_rank());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_failure_program: %s\n", e.what());
    return 1;
  }
  return 0;
}
