// runtime::check_degrees: the refusals about the parallel degrees, checked together before any transform changes the
// model, each naming its key. One process: every combination rule fires before the sizes are compared with the world.
#include <gtest/gtest.h>

#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "runtime/layout.h"

namespace {

using deepspeed::Config;
using deepspeed::InitializeOptions;

Config config(const std::string& extra) {
  return Config::from_string(R"({"train_micro_batch_size_per_gpu": 1)" + extra + "}");
}

// The message of check_degrees' ConfigError, or "" when it accepts.
std::string refusal(const Config& c, const InitializeOptions& options = {}) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  try {
    deepspeed::runtime::check_degrees(c, options);
  } catch (const deepspeed::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LayoutDegrees, OneRankWithoutParallelismIsAccepted) {
  EXPECT_EQ(refusal(config("")), "");
  EXPECT_EQ(refusal(config(R"(, "tensor_parallel": {"autotp_size": 1}, "sequence_parallel_size": 1)")), "");
}

TEST(LayoutDegrees, CombinationsAreRefusedNamingTheKey) {
  EXPECT_NE(refusal(config(R"(, "tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 3})"))
                .find("tensor_parallel.autotp_size: AutoTP training works with zero_optimization.stage 0, 1 or 2"),
            std::string::npos);
  EXPECT_NE(refusal(config(R"(, "tensor_parallel": {"autotp_size": 2}, "sequence_parallel_size": 2)"))
                .find("sequence_parallel_size: Ulysses does not combine with tensor parallelism"),
            std::string::npos);
  EXPECT_NE(refusal(config(R"(, "tensor_parallel": {"autotp_size": 2},
                               "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2})"))
                .find("AutoTP training works with zero_optimization.stage"),
            std::string::npos);
  EXPECT_NE(refusal(config(R"(, "tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 1},
                               "sequence_parallel_size": 1)"))
                .find("tensor_parallel.autotp_size (2) must divide the world of 1 ranks"),
            std::string::npos);
}

TEST(LayoutDegrees, ACallersLayoutLeavesNoRoomForTheConfigsOwn) {
  InitializeOptions options;
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  options.data_parallel_group = deepspeed::comm::get_world_group();
  EXPECT_NE(refusal(config(R"(, "tensor_parallel": {"autotp_size": 2})"), options)
                .find("tensor_parallel.autotp_size: with InitializeOptions::data_parallel_group"),
            std::string::npos);
  EXPECT_NE(refusal(config(R"(, "sequence_parallel_size": 2)"), options).find("Ulysses does not combine"),
            std::string::npos);
  // The world as the caller's data-parallel group changes nothing for hpZ: what refuses it here is the host.
  const std::string hpz = refusal(config(R"(, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2})"), options);
  EXPECT_EQ(hpz.find("secondary partitions need"), std::string::npos) << hpz;
  EXPECT_NE(hpz.find("must divide the ranks per host"), std::string::npos) << hpz;

}

TEST(LayoutDegrees, SizesMustDivideTheWorld) {
  EXPECT_NE(refusal(config(R"(, "sequence_parallel_size": 3)")).find("sequence_parallel_size (3) must divide the world "
                                                                      "of 1 ranks"),
            std::string::npos);
  // One rank per host: a secondary group of two would span hosts.
  EXPECT_NE(refusal(config(R"(, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2})"))
                .find("zero_hpz_partition_size 2 must divide the ranks per host (1"),
            std::string::npos);
}

}  // namespace
