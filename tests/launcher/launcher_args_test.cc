// The command line: DeepSpeed's flags and defaults, pass-through of the program's arguments,
// rejected flags.
#include "launcher/launcher_args.h"

#include <gtest/gtest.h>

#include "launcher/launcher.h"

namespace deepspeed::launcher {
namespace {

LauncherArgs parse(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "deepspeed");
  return parse_args(argv);
}

std::string usage_error(std::vector<std::string> argv) {
  try {
    parse(std::move(argv));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no usage error)";
}

TEST(LauncherArgs, DefaultsAreDeepSpeeds) {
  const LauncherArgs a = parse({"train"});
  EXPECT_EQ(a.hostfile, "/job/hostfile");
  EXPECT_EQ(a.include, "");
  EXPECT_EQ(a.exclude, "");
  EXPECT_EQ(a.num_nodes, -1);
  EXPECT_EQ(a.num_gpus, -1);
  EXPECT_EQ(a.master_port, 29500);
  EXPECT_EQ(a.master_addr, "");
  EXPECT_EQ(a.node_rank, -1);
  EXPECT_EQ(a.launcher, "");  // pdsh when installed, else ssh (plan_multinode)
  EXPECT_EQ(a.ssh_port, -1);  // ssh's own default
  EXPECT_FALSE(a.no_ssh || a.no_local_rank || a.save_pid || a.bind_cores_to_rank);
  EXPECT_EQ(a.enable_each_rank_log, "");
  EXPECT_EQ(a.user_script, "train");
  EXPECT_TRUE(a.user_args.empty());
}

TEST(LauncherArgs, ParsesEveryFlag) {
  const LauncherArgs a = parse({"-H",
                                "hosts",
                                "-i",
                                "a:0",
                                "--num_nodes=2",
                                "--num_gpus",
                                "4",
                                "--master_port",
                                "1234",
                                "--master_addr",
                                "10.0.0.1",
                                "--node_rank",
                                "1",
                                "--launcher",
                                "OpenMPI",
                                "--launcher_args",
                                "-x FOO",
                                "--no_ssh",
                                "--no_local_rank",
                                "--save_pid",
                                "--enable_each_rank_log",
                                "/tmp/logs",
                                "--bind_cores_to_rank",
                                "--bind_core_list",
                                "0-3",
                                "--no_ssh_check",
                                "--ssh_port",
                                "22",
                                "--comment",
                                "c",
                                "--account",
                                "acct",
                                "./prog"});
  EXPECT_EQ(a.hostfile, "hosts");
  EXPECT_EQ(a.include, "a:0");
  EXPECT_EQ(a.num_nodes, 2);
  EXPECT_EQ(a.num_gpus, 4);
  EXPECT_EQ(a.master_port, 1234);
  EXPECT_EQ(a.master_addr, "10.0.0.1");
  EXPECT_EQ(a.node_rank, 1);
  EXPECT_EQ(a.launcher, "openmpi");
  EXPECT_EQ(a.launcher_args, "-x FOO");
  EXPECT_TRUE(a.no_ssh && a.no_local_rank && a.save_pid && a.bind_cores_to_rank && a.no_ssh_check);
  EXPECT_EQ(a.enable_each_rank_log, "/tmp/logs");
  EXPECT_EQ(a.bind_core_list, "0-3");
  EXPECT_EQ(a.ssh_port, 22);
  EXPECT_EQ(a.account, "acct");
  EXPECT_EQ(a.user_script, "./prog");
}

TEST(LauncherArgs, MultiNodeFlags) {
  const LauncherArgs a = parse({"--force_multi", "--launcher", "SSH", "--world_info", "e30=",
                                "--stop_on_stdin_eof", "p"});
  EXPECT_TRUE(a.force_multi && a.stop_on_stdin_eof);
  EXPECT_EQ(a.launcher, "ssh");
  EXPECT_EQ(a.world_info, "e30=");
  EXPECT_EQ(parse({"--autotuning", "run", "p"}).autotuning, "run");
  EXPECT_NE(usage_error({"--launcher", "rsh", "p"}).find("--launcher"), std::string::npos);
  EXPECT_EQ(usage_error({"--ssh_port", "0", "p"}), "--ssh_port must be in [1, 65535], got 0");
}

TEST(LauncherArgs, ExcludeAndAliasesOfNumGpus) {
  EXPECT_EQ(parse({"-e", "h:1", "p"}).exclude, "h:1");
  EXPECT_EQ(parse({"--num_procs", "3", "p"}).num_gpus, 3);
  EXPECT_EQ(parse({"--num_accelerators=5", "p"}).num_gpus, 5);
}

TEST(LauncherArgs, EverythingAfterTheProgramIsPassedUntouched) {
  const LauncherArgs a =
      parse({"--num_procs", "2", "prog", "--num_procs", "7", "-H", "x", "", "a b", "--", "--help"});
  EXPECT_EQ(a.num_gpus, 2);
  EXPECT_EQ(a.hostfile, "/job/hostfile");
  EXPECT_EQ(a.user_script, "prog");
  EXPECT_EQ(a.user_args,
            (std::vector<std::string>{"--num_procs", "7", "-H", "x", "", "a b", "--", "--help"}));
}

TEST(LauncherArgs, NoneDisablesEachRankLog) {
  EXPECT_EQ(parse({"--enable_each_rank_log", "None", "p"}).enable_each_rank_log, "");
}

TEST(LauncherArgs, MissingProgramIsAUsageError) {
  EXPECT_EQ(usage_error({}),
            "missing the program to launch; usage: deepspeed [options] program [args...]");
  EXPECT_EQ(usage_error({"--num_procs", "2"}),
            "missing the program to launch; usage: deepspeed [options] program [args...]");
}

TEST(LauncherArgs, UnknownFlagIsAUsageErrorNamingIt) {
  EXPECT_EQ(usage_error({"--bogus", "prog"}),
            "unrecognized argument '--bogus' (see deepspeed --help)");
  EXPECT_EQ(usage_error({"-z", "prog"}), "unrecognized argument '-z' (see deepspeed --help)");
}

TEST(LauncherArgs, MalformedValuesAreUsageErrors) {
  EXPECT_NE(usage_error({"--num_gpus", "two", "p"}).find("--num_gpus"), std::string::npos);
  EXPECT_EQ(usage_error({"--master_port", "70000", "p"}),
            "--master_port must be in [1, 65535], got 70000");
  EXPECT_NE(usage_error({"p", "--x"}).find("(no usage error)"), std::string::npos);
}

TEST(LauncherArgs, PythonOnlyFlagsAreRejected) {
  EXPECT_EQ(
      usage_error({"--module", "p"}),
      "--module is Python-only: deepspeed-cpp runs the program as an executable; pass its path");
  EXPECT_EQ(
      usage_error({"--no_python", "p"}),
      "--no_python is Python-only: deepspeed-cpp always runs the program directly; drop the flag");
}

TEST(LauncherArgs, UnsupportedFlagsAreRejectedNotIgnored) {
  EXPECT_NE(usage_error({"--elastic_training", "p"}).find("not supported"), std::string::npos);
  EXPECT_NE(usage_error({"--min_elastic_nodes", "2", "p"}).find("not supported"),
            std::string::npos);
  EXPECT_NE(usage_error({"--autotuning", "search", "p"}).find("--autotuning"), std::string::npos);
}

TEST(LauncherArgs, HelpIsReportedSeparately) {
  try {
    parse({"--help"});
    ADD_FAILURE() << "expected HelpRequested";
  } catch (const HelpRequested& h) {
    EXPECT_NE(std::string(h.what()).find("--num_gpus"), std::string::npos);
    EXPECT_NE(std::string(h.what()).find("--hostfile"), std::string::npos);
  }
}

}  // namespace
}  // namespace deepspeed::launcher
