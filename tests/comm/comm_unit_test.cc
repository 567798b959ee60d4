// Single-process pieces of deepspeed::comm: environment parsing, message formatting, the logger's
// arithmetic and table, and a world of one started without any environment.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>

#include "comm/collective_check.h"
#include "comm/comms_logger.h"
#include "comm/env_init.h"
#include "comm/job_store.h"
#include "deepspeed/comm.h"

namespace dc = deepspeed::comm;
namespace dd = deepspeed::comm::detail;

namespace {

dd::EnvLookup fake_env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> full_env() {
  return {{"RANK", "2"},
          {"LOCAL_RANK", "0"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"}};
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    dd::read_dist_env(fake_env(vars));
  } catch (const deepspeed::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(EnvInit, ReadsAllVariables) {
  dd::DistEnv d = dd::read_dist_env(fake_env(full_env()));
  EXPECT_FALSE(d.single_process);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "10.0.0.1");
  EXPECT_EQ(d.master_port, 29500);
}

TEST(EnvInit, NoVariablesMeansSingleProcess) {
  dd::DistEnv d = dd::read_dist_env(fake_env({}));
  EXPECT_TRUE(d.single_process);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.rank, 0);
}

TEST(EnvInit, MissingAndMalformedVariablesAreNamed) {
  auto env = full_env();
  env.erase("MASTER_PORT");
  EXPECT_NE(error_of(env).find("MASTER_PORT is not set"), std::string::npos) << error_of(env);
  env = full_env();
  env["RANK"] = "two";
  EXPECT_NE(error_of(env).find("RANK='two' is not an integer"), std::string::npos) << error_of(env);
  env = full_env();
  env["RANK"] = "4";
  EXPECT_NE(error_of(env).find("RANK=4 is out of range [0, 3]"), std::string::npos)
      << error_of(env);
  env = full_env();
  env["MASTER_PORT"] = "70000";
  EXPECT_NE(error_of(env).find("MASTER_PORT=70000"), std::string::npos) << error_of(env);
  env = full_env();
  env.erase("MASTER_ADDR");
  EXPECT_NE(error_of(env).find("MASTER_ADDR is not set"), std::string::npos) << error_of(env);
}

TEST(EnvInit, RanksStartedByMpirunOrSrunFindTheirPlace) {
  // mpirun (deepspeed --launcher openmpi exports MASTER_ADDR/PORT with -x).
  dd::DistEnv d = dd::read_dist_env(fake_env({{"OMPI_COMM_WORLD_RANK", "3"},
                                              {"OMPI_COMM_WORLD_SIZE", "4"},
                                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                              {"MASTER_ADDR", "10.0.0.1"},
                                              {"MASTER_PORT", "29600"}}));
  EXPECT_FALSE(d.single_process);
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "10.0.0.1");
  EXPECT_EQ(d.master_port, 29600);
  // MPICH/Intel MPI, default port.
  d = dd::read_dist_env(fake_env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "h"}}));
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.master_port, 29500);
  // srun with the runner's exports.
  const std::map<std::string, std::string> slurm = {
      {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
      {"SLURM_NTASKS_PER_NODE", "4"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29500"}};
  d = dd::read_dist_env(fake_env(slurm));
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.local_world_size, 4);
  // srun's pmi2 plugin also sets PMI_RANK/PMI_SIZE (no local rank): Slurm's variables win.
  auto pmi2 = slurm;
  pmi2["PMI_RANK"] = "5";
  pmi2["PMI_SIZE"] = "8";
  d = dd::read_dist_env(fake_env(pmi2));
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
  // A batch script's single process sees Slurm's variables but no MASTER_ADDR: one process.
  auto batch = slurm;
  batch.erase("MASTER_ADDR");
  batch.erase("MASTER_PORT");
  EXPECT_TRUE(dd::read_dist_env(fake_env(batch)).single_process);
  // Our launcher's RANK wins over an enclosing allocation's variables.
  auto both = full_env();
  both.insert(slurm.begin(), slurm.end());
  EXPECT_EQ(dd::read_dist_env(fake_env(both)).rank, 2);
  // mpirun by hand without MASTER_ADDR: a clear error, not four single-process runs.
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}})
                .find("OpenMPI started this rank (OMPI_COMM_WORLD_SIZE=4) but MASTER_ADDR is not "
                      "set"),
            std::string::npos);
}

TEST(EnvInit, TimeoutAndCheckVariables) {
  EXPECT_FALSE(dd::read_timeout_env(fake_env({})).has_value());
  EXPECT_EQ(dd::read_timeout_env(fake_env({{"DS_COMM_TIMEOUT", "2"}}))->count(), 2000);
  EXPECT_EQ(dd::read_timeout_env(fake_env({{"DS_COMM_TIMEOUT", "0.25"}}))->count(), 250);
  EXPECT_THROW(dd::read_timeout_env(fake_env({{"DS_COMM_TIMEOUT", "-1"}})), deepspeed::Error);
  EXPECT_THROW(dd::read_timeout_env(fake_env({{"DS_COMM_TIMEOUT", "soon"}})), deepspeed::Error);
  EXPECT_TRUE(*dd::read_check_env(fake_env({{"DS_COMM_CHECK", "1"}})));
  EXPECT_FALSE(*dd::read_check_env(fake_env({{"DS_COMM_CHECK", "false"}})));
  EXPECT_THROW(dd::read_check_env(fake_env({{"DS_COMM_CHECK", "maybe"}})), deepspeed::Error);
}

// Issue 52: which job a rank belongs to: the launcher's DS_JOB_ID, else the identity of the starter that placed the
// rank (never another scheduler's: under mpirun inside a slurm allocation only some ranks see a SLURM_STEP_ID).
TEST(EnvInit, JobIdentityComesFromTheLauncherOrTheStarterThatPlacedTheRank) {
  auto with = [](std::map<std::string, std::string> vars, std::map<std::string, std::string> extra) {
    vars.insert(extra.begin(), extra.end());
    const dd::DistEnv d = dd::read_dist_env(fake_env(vars));
    return d.job_id + " <- " + d.job_id_source;
  };
  const std::map<std::string, std::string> launched = full_env();
  EXPECT_EQ(with(launched, {}), " <- ");
  EXPECT_EQ(with(launched, {{"DS_JOB_ID", "3f2a"}, {"TORCHELASTIC_RUN_ID", "r"}}), "3f2a <- DS_JOB_ID");
  EXPECT_EQ(with(launched, {{"TORCHELASTIC_RUN_ID", "run-9"}}), "run-9 <- TORCHELASTIC_RUN_ID");
  EXPECT_EQ(with(launched, {{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}, {"PMIX_NAMESPACE", "p"}}), " <- ");
  const std::map<std::string, std::string> mpirun = {
      {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  EXPECT_EQ(with(mpirun, {{"PMIX_NAMESPACE", "prterun-h-123@1"}, {"SLURM_JOB_ID", "77"}}),
            "prterun-h-123@1 <- PMIX_NAMESPACE");
  EXPECT_EQ(with(mpirun, {{"DS_JOB_ID", "abc"}, {"PMIX_NAMESPACE", "p"}}), "abc <- DS_JOB_ID");
  const std::map<std::string, std::string> srun = {
      {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}};
  EXPECT_EQ(with(srun, {{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "2"}, {"PMIX_NAMESPACE", "p"}}),
            "77.2 <- SLURM_JOB_ID.SLURM_STEP_ID");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                      {"DS_JOB_ID", std::string("a\nb")}}),
            "init_distributed: DS_JOB_ID='a\\x0ab' is not a job identity (at most 256 bytes, no control characters or "
            "backslashes)");
  EXPECT_NE(error_of({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                      {"DS_JOB_ID", std::string(300, 'x')}})
                .find("DS_JOB_ID='" + std::string(64, 'x') + "...' is not a job identity"),
            std::string::npos);
}

// Issue 52: a rank of another job that reaches this job's store (same MASTER_PORT) is refused before it writes
// anything, and the job's own ranks meet under a prefix of their own.
TEST(JobStore, OnlyRanksOfTheJobThatHostsTheStoreJoinIt) {
  auto store = dd::create_local_store();
  dd::DistEnv host;
  host.rank = 0;
  host.world_size = 2;
  host.master_addr = "127.0.0.1";
  host.master_port = 29611;
  host.job_id = "winner";
  auto hosted = dd::join_job_store(store, host);
  dd::DistEnv stranger = host;
  stranger.rank = 1;
  stranger.job_id = "loser";
  stranger.job_id_source = "DS_JOB_ID";
  try {
    dd::join_job_store(store, stranger);
    ADD_FAILURE() << "a rank of another job joined";
  } catch (const deepspeed::CommError& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank 1 of job 'loser' (DS_JOB_ID) reached the rendezvous store at 127.0.0.1:29611 "
              "(MASTER_ADDR/MASTER_PORT) of another job ('winner'): port 29611 is taken by another job (pick another "
              "with the launcher's --master_port), or this job's ranks were given different identities (export one "
              "DS_JOB_ID to all of them)");
  }
  dd::DistEnv unnamed = stranger;
  unnamed.job_id = "";
  EXPECT_THROW(dd::join_job_store(store, unnamed), deepspeed::CommError);
  dd::DistEnv peer = stranger;
  peer.job_id = "winner";
  auto joined = dd::join_job_store(store, peer);
  joined->set("rank_1", "addr");
  EXPECT_EQ(hosted->get("rank_1"), "addr");
  EXPECT_TRUE(store->check({"job/winner/rank_1"}));
  EXPECT_FALSE(store->check({"rank_1"}));
  EXPECT_FALSE(store->check({"job/loser/rank_1"}));
}

TEST(Describe, TensorsAndDurations) {
  EXPECT_EQ(dd::tensor_desc(at::zeros({4, 8}, at::kBFloat16)), "bfloat16[4, 8]");
  EXPECT_EQ(dd::tensor_desc(at::zeros({1024})), "float[1024]");
  EXPECT_EQ(dd::format_duration(std::chrono::milliseconds(2000)), "2s");
  EXPECT_EQ(dd::format_duration(std::chrono::milliseconds(1500)), "1.5s");
  EXPECT_EQ(dd::format_duration(std::chrono::milliseconds(250)), "250ms");
  EXPECT_EQ(dd::format_duration(std::chrono::minutes(30)), "30min");
}

TEST(CommsLogger, BusBandwidthFactorsAreDeepSpeeds) {
  EXPECT_DOUBLE_EQ(dd::busbw_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(dd::busbw_factor("all_gather_into_tensor", 4), 0.75);
  EXPECT_DOUBLE_EQ(dd::busbw_factor("reduce_scatter_tensor", 2), 0.5);
  EXPECT_DOUBLE_EQ(dd::busbw_factor("all_to_all_single", 4), 0.75);
  EXPECT_DOUBLE_EQ(dd::busbw_factor("broadcast", 4), 1.0);
  EXPECT_DOUBLE_EQ(dd::busbw_factor("send", 2), 1.0);
}

TEST(CommsLogger, AggregatesByOpAndSize) {
  dd::CommsLogger logger;
  dc::CommsLoggerOptions o;
  o.enabled = true;
  logger.configure(o);
  logger.record("all_reduce", 1 << 20, 2.0, 2, "");
  logger.record("all_reduce", 1 << 20, 4.0, 2, "");
  logger.record("all_reduce", 1 << 10, 1.0, 2, "");
  std::vector<dc::CommsStat> s = logger.stats();
  ASSERT_EQ(s.size(), 2u);
  // Sorted by (op, size): the 1 KiB entry first.
  EXPECT_EQ(s[1].msg_bytes, 1 << 20);
  EXPECT_EQ(s[1].count, 2);
  EXPECT_DOUBLE_EQ(s[1].total_latency_ms, 6.0);
  EXPECT_DOUBLE_EQ(s[1].avg_latency_ms, 3.0);
  EXPECT_DOUBLE_EQ(s[1].algbw_gbps, (1 << 20) / 3.0 * 1e-6);
  EXPECT_DOUBLE_EQ(s[1].busbw_gbps, s[1].algbw_gbps * 1.0);  // 2(n-1)/n = 1 at n = 2
  std::string table = logger.summary();
  EXPECT_NE(table.find("1.00 MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("Avg Latency(ms)"), std::string::npos) << table;
  o.prof_all = false;
  o.prof_ops = {"broadcast"};
  logger.configure(o);
  EXPECT_FALSE(logger.should_log("all_reduce"));
  EXPECT_TRUE(logger.should_log("broadcast"));
  o.enabled = false;
  logger.configure(o);
  EXPECT_FALSE(logger.should_log("broadcast"));
}

TEST(SingleProcess, WorldOfOneWithoutEnvironment) {
  // Each CTest case is its own process, so clearing the launcher's variables here affects only this test.
  for (const char* var : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(var);
  EXPECT_THROW(dc::get_rank(), deepspeed::CommError);
  dc::init_distributed();
  EXPECT_EQ(dc::get_world_size(), 1);
  EXPECT_THROW(dc::init_distributed(), deepspeed::CommError);
  at::Tensor x = at::full({3}, 5.0, at::kBFloat16);
  dc::get_world_group().all_reduce(x, dc::ReduceOp::kAvg);
  EXPECT_TRUE(at::equal(x, at::full({3}, 5.0, at::kBFloat16)));
  dc::ProcessGroup g = dc::get_world_group();
  dc::destroy_process_group();
  EXPECT_FALSE(dc::is_initialized());
  EXPECT_THROW(g.barrier(), deepspeed::CommError);
}

TEST(SingleProcess, BackendsThisProcessCannotUseAreNamedAndNothingIsLeftHalfMade) {
  for (const char* var : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(var);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // the cpu accelerator, even on a GPU machine
  const auto error_of = [](const char* backend) -> std::string {
    dc::InitOptions o;
    o.backend = backend;
    try {
      dc::init_distributed(o);
    } catch (const deepspeed::CommError& e) {
      return e.what();
    }
    return "";
  };
  const std::string nccl = error_of("nccl");
  EXPECT_NE(nccl.find("comm backend 'nccl'"), std::string::npos) << nccl;
  EXPECT_NE(nccl.find("use \"gloo\""), std::string::npos) << nccl;
  EXPECT_FALSE(dc::is_initialized()) << "a refused backend leaves no half-made world";
  const std::string mpi = error_of("mpi");
  EXPECT_NE(mpi.find("comm backend 'mpi' is not supported"), std::string::npos) << mpi;
  setenv("DS_COMM_BACKEND", "nccl", 1);  // the environment's choice when the caller names none
  EXPECT_THROW(dc::backend_capabilities(), deepspeed::CommError) << "the capabilities of the backend init would use";
  const std::string from_env = error_of("");
  EXPECT_NE(from_env.find("comm backend 'nccl'"), std::string::npos) << from_env;
  unsetenv("DS_COMM_BACKEND");
  EXPECT_EQ(dc::backend_capabilities().backend, "gloo") << "before init: the cpu accelerator's default";
  dc::init_distributed();  // the default (the accelerator's gloo) still works in the same process
  EXPECT_EQ(dc::backend_capabilities().backend, "gloo");
  dc::destroy_process_group();
}

}  // namespace
