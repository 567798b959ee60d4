// csv_monitor through the engine at 2 ranks: rank 0 alone writes one row per optimizer step, at
// DeepSpeed's step (global samples), and the rows read back to the values the engine had: the
// step's mean loss over its micro-batches, the lr of the schedule, the clipped gradient norm.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "tiny_gpt.h"

namespace {

std::vector<std::pair<int64_t, double>> rows_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::pair<int64_t, double>> out;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const size_t comma = line.find(',');
    out.emplace_back(std::stoll(line.substr(0, comma)), std::stod(line.substr(comma + 1)));
  }
  return out;
}

TEST(CsvMonitorEngine, RowsReadBackToTheEnginesValues) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const char* port = std::getenv("MASTER_PORT");
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ds_csv_monitor_" + std::string(port ? port : "0")))
                              .string();
  if (rank == 0) std::filesystem::remove_all(dir);
  deepspeed::comm::barrier();
  const auto config = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                       "warmup_num_steps": 4}},
          "csv_monitor": {"enabled": true, "output_path": ")" +
      dir + R"(", "job_name": "tiny"},
          "tensorboard": {"enabled": true, "output_path": ")" +
      dir + R"(/tb", "job_name": "tiny"}})");
  auto model = tiny_gpt::make_model(tiny_gpt::config());
  deepspeed::InitializeOptions options;
  options.tokens_per_sample = tiny_gpt::config().seq_len;
  auto engine = deepspeed::initialize(model, config, options);
  const int steps = 5;
  std::vector<double> lrs, norms;
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto micro = tiny_gpt::train(engine, tiny_gpt::dataset(tiny_gpt::config()), 1, s);
    losses.push_back((micro[0] + micro[1]) / 2);
    lrs.push_back(engine.get_lr()[0]);
    norms.push_back(engine.get_global_grad_norm());
  }
  deepspeed::comm::barrier();
  if (rank == 0) {
    const std::string job = dir + "/tiny/";
    const auto loss = rows_of(job + "Train_Samples_train_loss.csv");
    const auto lr = rows_of(job + "Train_Samples_lr.csv");
    const auto norm = rows_of(job + "Train_Samples_grad_norm.csv");
    ASSERT_EQ(loss.size(), static_cast<size_t>(steps)) << "one row per step, from rank 0 only";
    ASSERT_EQ(lr.size(), static_cast<size_t>(steps));
    ASSERT_EQ(norm.size(), static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) {
      EXPECT_EQ(loss[s].first, (s + 1) * 8)
          << "step = global samples (batch 2 x 2 accumulation x 2 ranks)";
      EXPECT_EQ(loss[s].second, losses[s]) << s;
      EXPECT_EQ(lr[s].second, lrs[s]) << s;
      EXPECT_EQ(norm[s].second, norms[s]) << s;
    }
    EXPECT_NE(lr[0].second, lr[steps - 1].second) << "the schedule moved the lr";
    const auto samples = rows_of(job + "Train_Samples_samples_per_sec.csv");
    const auto tokens = rows_of(job + "Train_Samples_tokens_per_sec.csv");
    ASSERT_EQ(samples.size(), static_cast<size_t>(steps));
    ASSERT_EQ(tokens.size(), static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) {
      EXPECT_GT(samples[s].second, 0.0);
      EXPECT_DOUBLE_EQ(tokens[s].second, samples[s].second * tiny_gpt::config().seq_len) << "tokens = samples x seq";
    }
    EXPECT_EQ(rows_of(job + "Train_Samples_memory_allocated_mb.csv").size(),
              static_cast<size_t>(steps));
    EXPECT_FALSE(std::filesystem::exists(job + "Train_Samples_loss_scale.csv"))
        << "no loss scale without fp16";

    // One event file, read independently: "<step> <tag> <value>" per scalar.
    std::vector<std::filesystem::path> files;
    for (const auto& f : std::filesystem::directory_iterator(dir + "/tb/tiny"))
      files.push_back(f.path());
    ASSERT_EQ(files.size(), 1u);
    const std::string out = dir + "/tb.txt";
    ASSERT_EQ(std::system(
                  ("/usr/bin/python3 " READ_TFEVENTS " '" + files[0].string() + "' > '" + out + "'")
                      .c_str()),
              0)
        << "read_tfevents.py failed (python3-protobuf missing? run scripts/setup.sh)";
    std::ifstream in(out);
    std::map<std::string, std::vector<std::pair<int64_t, double>>> tb;
    int64_t step = 0;
    std::string tag;
    double value = 0;
    while (in >> step >> tag >> value) tb[tag].emplace_back(step, value);
    ASSERT_EQ(tb["Train/Samples/train_loss"].size(), static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) {
      EXPECT_EQ(tb["Train/Samples/train_loss"][s].first, (s + 1) * 8);
      EXPECT_EQ(tb["Train/Samples/train_loss"][s].second,
                static_cast<double>(static_cast<float>(losses[s])));
      EXPECT_EQ(tb["Train/Samples/lr"][s].second, static_cast<double>(static_cast<float>(lrs[s])));
      EXPECT_EQ(tb["Train/Samples/grad_norm"][s].second,
                static_cast<double>(static_cast<float>(norms[s])));
    }
    std::filesystem::remove_all(dir);
  }
}

// InitializeOptions::count_trained_tokens: tokens/s counts what the loop reported through add_trained_tokens, summed
// over both ranks, not samples x seq_len. Both rates of a row share one step's time, so their ratio is exact:
// (tokens of the step over both ranks) / (samples of the step).
TEST(CsvMonitorEngine, TokensPerSecCountsTheTrainedTokensOfEveryRank) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const char* port = std::getenv("MASTER_PORT");
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ds_csv_tokens_" + std::string(port ? port : "0"))).string();
  if (rank == 0) std::filesystem::remove_all(dir);
  deepspeed::comm::barrier();
  const auto config = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
          "csv_monitor": {"enabled": true, "output_path": ")" +
      dir + R"(", "job_name": "tokens"}})");
  {  // without the option the call is refused, not ignored
    auto model = tiny_gpt::make_model(tiny_gpt::config());
    auto engine = deepspeed::initialize(model, config);
    EXPECT_THROW(engine.add_trained_tokens(5), deepspeed::Error);
  }
  auto model = tiny_gpt::make_model(tiny_gpt::config());
  deepspeed::InitializeOptions options;
  options.tokens_per_sample = tiny_gpt::config().seq_len;
  options.count_trained_tokens = true;
  auto engine = deepspeed::initialize(model, config, options);
  EXPECT_THROW(engine.add_trained_tokens(-1), deepspeed::Error);
  const at::Tensor data = tiny_gpt::dataset(tiny_gpt::config());
  const int steps = 3;
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < 2; ++m) engine.add_trained_tokens(3 * (rank + 1) + s);  // rank 0: 3+s, rank 1: 6+s
    tiny_gpt::train(engine, data, 1, s);
  }
  deepspeed::comm::barrier();
  if (rank == 0) {
    const auto samples = rows_of(dir + "/tokens/Train_Samples_samples_per_sec.csv");
    const auto tokens = rows_of(dir + "/tokens/Train_Samples_tokens_per_sec.csv");
    ASSERT_EQ(tokens.size(), static_cast<size_t>(steps));
    ASSERT_EQ(samples.size(), static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) {
      const double step_tokens = 2.0 * ((3 + s) + (6 + s));  // 2 micro-batches on each of 2 ranks
      EXPECT_NEAR(tokens[s].second / samples[s].second, step_tokens / 8.0, 1e-9 * step_tokens)
          << "step " << s << ": 8 samples per step";
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
